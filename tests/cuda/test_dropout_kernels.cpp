// Dropout kernels: the mask against dropout_rule.hpp's counter-based draw evaluated on the host
// (the key read from device memory, where launch_store_key puts it),
// its keep rate and scale against the CPU Dropout layer (which draws the same counter-based
// mask), and backward, in f32, bf16 and f16 on poisoned
// outputs. Skips without a GPU (dtype checks aside).
#include <cmath>
#include <string>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "kernels/dropout_kernels.hpp"
#include "ringtrain/nn/dropout_rule.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain {
namespace {

using test::DeviceBuffer;
using test::kFloatDTypes;

constexpr std::uint64_t kSeed = 1234;
constexpr std::int64_t kStep = 17;
constexpr int kRank = 3, kLayer = 2;

// Kept fraction of CPU Dropout's mask (forward of ones: kept elements become 1/(1-p)).
double cpu_keep_rate(std::int64_t n, float p, float* kept_value) {
  std::vector<float> ones(static_cast<std::size_t>(n), 1.0f), out(static_cast<std::size_t>(n));
  Tensor x = Tensor::wrap(ones.data(), Shape{n}), y = Tensor::wrap(out.data(), Shape{n});
  StepInfo info;
  info.seed = kSeed;
  info.step = kStep;
  info.rank = kRank;
  Dropout(p, kLayer).forward(x, y, info);
  std::int64_t kept = 0;
  for (float v : out)
    if (v != 0.0f) {
      ++kept;
      *kept_value = v;
    }
  return static_cast<double>(kept) / static_cast<double>(n);
}

TEST(CudaDropoutKernels, ForwardAndBackwardMatchTheRule) {
  RT_SKIP_WITHOUT_GPU();
  const std::uint64_t key = dropout_key(kSeed, kStep, kRank, kLayer);
  for (DType dtype : kFloatDTypes)
    for (std::size_t n : {1u, 7u, 1'000'003u})
      for (float p : {0.0f, 0.3f, 0.9f}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " n " + std::to_string(n) + " p " + std::to_string(p));
        const auto x = test::random_values(n, 51, dtype), dy = test::random_values(n, 52, dtype);
        std::vector<std::uint8_t> mask(n);
        std::vector<float> y(n), dx(n);
        const float scale = dropout_scale(p);
        for (std::size_t i = 0; i < n; ++i) {
          mask[i] = dropout_keep(dropout_uniform(key, static_cast<std::int64_t>(i)), p) ? 1 : 0;
          y[i] = test::round_to(dtype, x[i] * (mask[i] != 0 ? scale : 0.0f));
          dx[i] = test::round_to(dtype, dy[i] * (mask[i] != 0 ? scale : 0.0f));
        }
        const auto len = static_cast<std::int64_t>(n);
        auto d_x = DeviceBuffer::of_values(x, dtype), d_dy = DeviceBuffer::of_values(dy, dtype);
        DeviceBuffer d_y(n * dtype_size(dtype)), d_mask(n), d_dx(n * dtype_size(dtype));
        const auto d_key = DeviceBuffer::of(std::vector<std::uint64_t>{key});
        kernels::launch_dropout_forward(d_x.get(), d_y.get(), d_mask.as<std::uint8_t>(), len, p,
                                        d_key.as<std::uint64_t>(), dtype, nullptr);
        kernels::launch_dropout_backward(d_dy.get(), d_mask.as<std::uint8_t>(), d_dx.get(), len, p, dtype, nullptr);
        const auto gpu_mask = d_mask.read<std::uint8_t>();
        test::expect_same_bits(gpu_mask, mask);
        test::expect_close(d_y.read_values(dtype), y, test::tolerance(dtype));
        test::expect_close(d_dx.read_values(dtype), dx, test::tolerance(dtype));
        if (n < 1000) continue;
        // Same distribution as the CPU layer: keep rates within 5 sigma of each other, same scale.
        std::int64_t kept = 0;
        for (std::uint8_t m : gpu_mask) kept += m;
        float cpu_kept_value = 0.0f;
        const double cpu_rate = cpu_keep_rate(len, p, &cpu_kept_value);
        const double gpu_rate = static_cast<double>(kept) / static_cast<double>(n);
        const double sigma = std::sqrt(p * (1.0 - p) / static_cast<double>(n));
        EXPECT_LE(std::fabs(gpu_rate - (1.0 - p)), 5 * sigma + 1e-12);
        EXPECT_LE(std::fabs(gpu_rate - cpu_rate), 7 * sigma + 1e-12);
        EXPECT_EQ(cpu_kept_value, scale);
      }
}

TEST(CudaDropoutKernels, InPlaceAndAcrossKeys) {
  RT_SKIP_WITHOUT_GPU();
  const std::size_t n = 4099;
  const auto x = test::random_values(n, 53);
  auto d_x = DeviceBuffer::of(x);
  DeviceBuffer mask_a(n), mask_b(n), d_y(n * sizeof(float)), d_key(sizeof(std::uint64_t));
  auto* key = d_key.as<std::uint64_t>();
  kernels::launch_store_key(key, dropout_key(kSeed, kStep, kRank, kLayer), nullptr);
  EXPECT_EQ(d_key.read<std::uint64_t>(), std::vector<std::uint64_t>{dropout_key(kSeed, kStep, kRank, kLayer)});
  kernels::launch_dropout_forward(d_x.get(), d_y.get(), mask_a.as<std::uint8_t>(), n, 0.5f, key, DType::f32, nullptr);
  kernels::launch_dropout_forward(d_x.get(), d_x.get(), mask_b.as<std::uint8_t>(), n, 0.5f, key, DType::f32, nullptr);
  test::expect_same_bits(d_x.read<float>(), d_y.read<float>());
  test::expect_same_bits(mask_b.read<std::uint8_t>(), mask_a.read<std::uint8_t>());
  // Another step's key, stored in the same slot, gives another mask.
  kernels::launch_store_key(key, dropout_key(kSeed, kStep + 1, kRank, kLayer), nullptr);
  kernels::launch_dropout_forward(d_y.get(), d_y.get(), mask_b.as<std::uint8_t>(), n, 0.5f, key, DType::f32, nullptr);
  EXPECT_NE(mask_b.read<std::uint8_t>(), mask_a.read<std::uint8_t>());
}

// 16-byte vectors (and mask vectors of as many bytes) when x, y and the mask are aligned,
// single elements otherwise: views one element in give the same mask and bits, since the draw
// depends on the element's index in the view alone.
TEST(CudaDropoutKernels, UnalignedViewsGiveTheSameBitsAsAlignedOnes) {
  RT_SKIP_WITHOUT_GPU();
  const auto d_key = DeviceBuffer::of(std::vector<std::uint64_t>{dropout_key(kSeed, kStep, kRank, kLayer)});
  const auto* key = d_key.as<std::uint64_t>();
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::size_t n = 1'003, size = dtype_size(dtype);
    const auto len = static_cast<std::int64_t>(n);
    const auto x = test::random_values(n + 1, 54, dtype), dy = test::random_values(n + 1, 55, dtype);
    const auto x_whole = DeviceBuffer::of_values(x, dtype), dy_whole = DeviceBuffer::of_values(dy, dtype);
    const auto x_aligned = DeviceBuffer::of_values({x.begin() + 1, x.end()}, dtype);
    const auto dy_aligned = DeviceBuffer::of_values({dy.begin() + 1, dy.end()}, dtype);
    DeviceBuffer y_aligned(n * size), mask_aligned(n), dx_aligned(n * size);
    DeviceBuffer y_whole((n + 1) * size), mask_whole(n + 1), dx_whole((n + 1) * size);
    auto* mask1 = static_cast<std::uint8_t*>(mask_whole.at(1));
    kernels::launch_dropout_forward(x_aligned.get(), y_aligned.get(), mask_aligned.as<std::uint8_t>(), len, 0.3f, key,
                                    dtype, nullptr);
    kernels::launch_dropout_forward(x_whole.at(size), y_whole.at(size), mask1, len, 0.3f, key, dtype, nullptr);
    test::expect_same_bits(mask_whole.bytes_from(1), mask_aligned.read<std::uint8_t>());
    test::expect_same_bits(y_whole.bytes_from(size), y_aligned.read<std::uint8_t>());
    kernels::launch_dropout_backward(dy_aligned.get(), mask_aligned.as<std::uint8_t>(), dx_aligned.get(), len, 0.3f,
                                     dtype, nullptr);
    kernels::launch_dropout_backward(dy_whole.at(size), mask1, dx_whole.at(size), len, 0.3f, dtype, nullptr);
    test::expect_same_bits(dx_whole.bytes_from(size), dx_aligned.read<std::uint8_t>());
  }
}

TEST(CudaDropoutKernels, NoElementsLaunchNothing) {
  RT_SKIP_WITHOUT_GPU();
  DeviceBuffer poisoned(16);
  for (DType dtype : kFloatDTypes) {
    kernels::launch_dropout_forward(poisoned.get(), poisoned.get(), poisoned.as<std::uint8_t>(), 0, 0.5f,
                                    poisoned.as<std::uint64_t>(), dtype, nullptr);
    kernels::launch_dropout_backward(poisoned.get(), poisoned.as<std::uint8_t>(), poisoned.get(), 0, 0.5f, dtype,
                                     nullptr);
  }
  EXPECT_EQ(poisoned.read<std::uint8_t>(), std::vector<std::uint8_t>(16, 0xff));
}

TEST(CudaDropoutKernels, BadDtypeOrProbabilityThrows) {
  float dummy = 0.0f;
  std::uint8_t mask = 0;
  const std::uint64_t key = 1;
  test::expect_error_naming(
      [&] { kernels::launch_dropout_forward(&dummy, &dummy, &mask, 1, 0.5f, &key, DType::u8, nullptr); }, "u8");
  test::expect_error_naming(
      [&] { kernels::launch_dropout_backward(&dummy, &mask, &dummy, 1, 0.5f, DType::i32, nullptr); }, "i32");
  test::expect_error_naming(
      [&] { kernels::launch_dropout_forward(&dummy, &dummy, &mask, 1, 1.0f, &key, DType::f32, nullptr); }, "p must be");
}

// Host-only: the rule's counter-based draw is uniform (mean 1/2, variance 1/12) and in [0, 1).
TEST(DropoutRule, CounterDrawIsUniform) {
  const std::uint64_t key = dropout_key(kSeed, kStep, kRank, kLayer);
  const std::int64_t n = 1'000'000;
  double sum = 0.0, sum2 = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double u = dropout_uniform(key, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sum2 += u * u;
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12.0 / n));
  EXPECT_NEAR(var, 1.0 / 12.0, 1e-3);
}

}  // namespace
}  // namespace ringtrain
