// Bias + activation forward, ReLU and GELU forward/backward and bias gradient against the CPU (the
// ReLU and GELU layers, plain loops for the bias), in f32, bf16 and f16 (the bias in f32 or the
// values' dtype), on poisoned outputs. Skips without a GPU, except the dtype checks, which fail
// before any CUDA call.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "kernels/activation_kernels.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain {
namespace {

using kernels::Activation;
using test::DeviceBuffer;
using test::kFloatDTypes;

struct Extents {
  std::int64_t outer, channels, inner;
  std::int64_t numel() const { return outer * channels * inner; }
};

// Odd sizes, channels past the grid's 65535 blocks, and a single channel of 10^6 elements.
constexpr Extents kExtents[] = {{1, 1, 1}, {1, 7, 1}, {3, 5, 7}, {7, 13, 10007}, {1, 1'000'003, 1}, {1'000'003, 1, 1}};

std::vector<float> cpu_relu(const std::vector<float>& x) {
  std::vector<float> in = x, out(x.size());
  Tensor tx = Tensor::wrap(in.data(), Shape{static_cast<std::int64_t>(in.size())});
  Tensor ty = Tensor::wrap(out.data(), Shape{static_cast<std::int64_t>(out.size())});
  ReLU().forward(tx, ty, StepInfo{});
  return out;
}

TEST(CudaActivationKernels, BiasActForwardMatchesCpu) {
  RT_SKIP_WITHOUT_GPU();
  for (DType dtype : kFloatDTypes)
    for (const Extents& e : kExtents)
      for (Activation act : {Activation::none, Activation::relu})
        for (const auto& [with_bias, bias_dtype] :
             {std::pair{false, DType::f32}, std::pair{true, DType::f32}, std::pair{true, dtype}}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " [" + std::to_string(e.outer) + ", " +
                       std::to_string(e.channels) + ", " + std::to_string(e.inner) + "] relu " +
                       std::to_string(act == Activation::relu) + " bias " + std::to_string(with_bias) + " of " +
                       std::string(dtype_name(bias_dtype)));
          const auto n = static_cast<std::size_t>(e.numel());
          const auto y = test::random_values(n, 1, dtype, 2.0f);
          const auto bias = test::random_values(static_cast<std::size_t>(e.channels), 2, bias_dtype);
          std::vector<float> ref = y;
          if (with_bias)
            for (std::size_t i = 0; i < n; ++i) ref[i] += bias[(i / static_cast<std::size_t>(e.inner)) % bias.size()];
          if (act == Activation::relu) ref = cpu_relu(ref);
          auto dy = DeviceBuffer::of_values(y, dtype);
          auto db = DeviceBuffer::of_values(bias, bias_dtype);
          kernels::launch_bias_act_forward(dy.get(), with_bias ? db.get() : nullptr, bias_dtype, e.outer, e.channels,
                                           e.inner, act, dtype, nullptr);
          test::expect_close(dy.read_values(dtype), test::round_to(dtype, ref), test::tolerance(dtype));
        }
}

TEST(CudaActivationKernels, ReluForwardMatchesCpu) {
  RT_SKIP_WITHOUT_GPU();
  for (DType dtype : kFloatDTypes)
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, test::kBeyondOneGrid}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n " + std::to_string(n));
      const auto x = test::random_values(n, 6, dtype);
      const auto ref = cpu_relu(x);
      auto dx = DeviceBuffer::of_values(x, dtype);
      DeviceBuffer dy(n * dtype_size(dtype));
      kernels::launch_relu_forward(dy.get(), dx.get(), static_cast<std::int64_t>(n), dtype, nullptr);
      test::expect_close(dy.read_values(dtype), ref, test::tolerance(dtype));
      kernels::launch_relu_forward(dx.get(), dx.get(), static_cast<std::int64_t>(n), dtype, nullptr);  // in place
      test::expect_close(dx.read_values(dtype), ref, test::tolerance(dtype));
    }
}

TEST(CudaActivationKernels, ReluBackwardMatchesCpu) {
  RT_SKIP_WITHOUT_GPU();
  for (DType dtype : kFloatDTypes)
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, test::kBeyondOneGrid}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n " + std::to_string(n));
      const auto y = cpu_relu(test::random_values(n, 3, dtype));
      const auto g = test::random_values(n, 4, dtype);
      std::vector<float> y_copy = y, g_copy = g, ref(n);
      const auto len = static_cast<std::int64_t>(n);
      Tensor ty = Tensor::wrap(y_copy.data(), Shape{len}), tg = Tensor::wrap(g_copy.data(), Shape{len});
      Tensor tdx = Tensor::wrap(ref.data(), Shape{len});
      ReLU().backward(ty, ty, tg, &tdx);

      auto dy_out = DeviceBuffer::of_values(y, dtype), dgrad = DeviceBuffer::of_values(g, dtype);
      DeviceBuffer dx(n * dtype_size(dtype));
      kernels::launch_relu_backward(dx.get(), dy_out.get(), dgrad.get(), len, dtype, nullptr);
      test::expect_close(dx.read_values(dtype), ref, test::tolerance(dtype));
      // dx aliasing dy, as the CUDA layers use it in place.
      kernels::launch_relu_backward(dgrad.get(), dy_out.get(), dgrad.get(), len, dtype, nullptr);
      test::expect_close(dgrad.read_values(dtype), ref, test::tolerance(dtype));
    }
}

// The CPU GELU layer's forward of x and backward of dy at x.
std::pair<std::vector<float>, std::vector<float>> cpu_gelu(const std::vector<float>& x, const std::vector<float>& dy) {
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<float> in = x, g = dy, y(x.size()), dx(x.size());
  Tensor tx = Tensor::wrap(in.data(), Shape{n}), ty = Tensor::wrap(y.data(), Shape{n});
  Tensor tg = Tensor::wrap(g.data(), Shape{n}), tdx = Tensor::wrap(dx.data(), Shape{n});
  Gelu gelu;
  gelu.forward(tx, ty, StepInfo{});
  gelu.backward(tx, ty, tg, &tdx);
  return {y, dx};
}

TEST(CudaActivationKernels, GeluMatchesCpu) {
  RT_SKIP_WITHOUT_GPU();
  for (DType dtype : kFloatDTypes)
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, test::kBeyondOneGrid}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n " + std::to_string(n));
      const auto x = test::random_values(n, 8, dtype, 6.0f);  // both tails and the bend around 0
      const auto g = test::random_values(n, 9, dtype);
      const auto [y_ref, dx_ref] = cpu_gelu(x, g);
      const auto len = static_cast<std::int64_t>(n);
      auto dx_in = DeviceBuffer::of_values(x, dtype), dgrad = DeviceBuffer::of_values(g, dtype);
      DeviceBuffer dy(n * dtype_size(dtype)), ddx(n * dtype_size(dtype));  // poisoned
      kernels::launch_gelu_forward(dy.get(), dx_in.get(), len, dtype, nullptr);
      test::expect_close(dy.read_values(dtype), test::round_to(dtype, y_ref), test::tolerance(dtype));
      kernels::launch_gelu_backward(ddx.get(), dx_in.get(), dgrad.get(), len, dtype, nullptr);
      test::expect_close(ddx.read_values(dtype), test::round_to(dtype, dx_ref), test::tolerance(dtype));
      kernels::launch_gelu_backward(dgrad.get(), dx_in.get(), dgrad.get(), len, dtype, nullptr);  // dx aliasing dy
      test::expect_close(dgrad.read_values(dtype), test::round_to(dtype, dx_ref), test::tolerance(dtype));
    }
}

// The element-wise maps move 16-byte packs when every pointer is 16-byte aligned and single
// elements otherwise: views one element into a buffer take the second path and must give the
// same bits as the aligned first (here: GELU forward and backward, whose packs are 4 or 8 wide).
TEST(CudaActivationKernels, UnalignedViewsGiveTheSameBitsAsAlignedOnes) {
  RT_SKIP_WITHOUT_GPU();
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::size_t n = 1'003, size = dtype_size(dtype);
    const auto x = test::random_values(n + 1, 8, dtype, 6.0f), g = test::random_values(n + 1, 9, dtype);
    auto dx_in = DeviceBuffer::of_values(x, dtype), dgrad = DeviceBuffer::of_values(g, dtype);
    DeviceBuffer aligned(n * size), unaligned((n + 1) * size);
    const void* x1 = dx_in.at(size);  // elements 1..n: off by one element
    const void* g1 = dgrad.at(size);
    void* out1 = unaligned.at(size);
    const auto x_aligned = DeviceBuffer::of_values({x.begin() + 1, x.end()}, dtype);
    const auto g_aligned = DeviceBuffer::of_values({g.begin() + 1, g.end()}, dtype);
    const auto len = static_cast<std::int64_t>(n);
    kernels::launch_gelu_forward(aligned.get(), x_aligned.get(), len, dtype, nullptr);
    kernels::launch_gelu_forward(out1, x1, len, dtype, nullptr);
    test::expect_same_bits(unaligned.bytes_from(size), aligned.read<std::uint8_t>());
    kernels::launch_gelu_backward(aligned.get(), x_aligned.get(), g_aligned.get(), len, dtype, nullptr);
    kernels::launch_gelu_backward(out1, x1, g1, len, dtype, nullptr);
    test::expect_same_bits(unaligned.bytes_from(size), aligned.read<std::uint8_t>());
  }
}

TEST(CudaActivationKernels, BiasGradMatchesCpuAndIsDeterministic) {
  RT_SKIP_WITHOUT_GPU();
  for (DType dtype : kFloatDTypes)
    for (const Extents& e : kExtents) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " [" + std::to_string(e.outer) + ", " + std::to_string(e.channels) +
                   ", " + std::to_string(e.inner) + "]");
      const auto g = test::random_values(static_cast<std::size_t>(e.numel()), 5, dtype);
      std::vector<double> sums(static_cast<std::size_t>(e.channels), 0.0);
      for (std::int64_t o = 0; o < e.outer; ++o)
        for (std::int64_t c = 0; c < e.channels; ++c)
          for (std::int64_t i = 0; i < e.inner; ++i)
            sums[static_cast<std::size_t>(c)] += g[static_cast<std::size_t>((o * e.channels + c) * e.inner + i)];
      const std::vector<float> ref(sums.begin(), sums.end());
      auto dg = DeviceBuffer::of_values(g, dtype);
      DeviceBuffer db(ref.size() * sizeof(float));
      kernels::launch_bias_grad(db.as<float>(), dg.get(), e.outer, e.channels, e.inner, dtype, nullptr);
      const auto first = db.read<float>();
      // Sums of +-1 values can be near zero: the bound is relative to the largest channel sum.
      test::expect_close(first, ref, test::tolerance(dtype));
      db.poison();
      kernels::launch_bias_grad(db.as<float>(), dg.get(), e.outer, e.channels, e.inner, dtype, nullptr);
      const auto second = db.read<float>();
      EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0) << "not deterministic";
    }
}

TEST(CudaActivationKernels, EmptyBatchZeroesTheBiasGradient) {
  RT_SKIP_WITHOUT_GPU();
  DeviceBuffer db(5 * sizeof(float));
  kernels::launch_bias_grad(db.as<float>(), nullptr, 0, 5, 3, DType::f32, nullptr);
  EXPECT_EQ(db.read<float>(), std::vector<float>(5, 0.0f));
}

TEST(CudaActivationKernels, NoElementsLaunchesNothing) {
  RT_SKIP_WITHOUT_GPU();
  DeviceBuffer poisoned(16);
  for (DType dtype : kFloatDTypes) {
    kernels::launch_bias_act_forward(poisoned.get(), poisoned.get(), DType::f32, 0, 4, 4, Activation::relu, dtype,
                                     nullptr);
    kernels::launch_relu_forward(poisoned.get(), poisoned.get(), 0, dtype, nullptr);
    kernels::launch_relu_backward(poisoned.get(), poisoned.get(), poisoned.get(), 0, dtype, nullptr);
    kernels::launch_bias_grad(poisoned.as<float>(), poisoned.get(), 3, 0, 3, dtype, nullptr);
  }
  EXPECT_EQ(poisoned.read<std::uint8_t>(), std::vector<std::uint8_t>(16, 0xff));
}

// Host-side checks: no GPU needed.
TEST(CudaActivationKernels, UnsupportedDtypeThrowsNamingIt) {
  float dummy = 0.0f;
  test::expect_error_naming(
      [&] {
        kernels::launch_bias_act_forward(&dummy, nullptr, DType::f32, 1, 1, 1, Activation::relu, DType::i32, nullptr);
      },
      "i32");
  // a bias of another low precision than the values'
  test::expect_error_naming(
      [&] {
        kernels::launch_bias_act_forward(&dummy, &dummy, DType::f16, 1, 1, 1, Activation::none, DType::bf16, nullptr);
      },
      "f16 bias for bf16");
  test::expect_error_naming([&] { kernels::launch_relu_forward(&dummy, &dummy, 1, DType::i32, nullptr); }, "i32");
  test::expect_error_naming([&] { kernels::launch_relu_backward(&dummy, &dummy, &dummy, 1, DType::i32, nullptr); },
                            "i32");
  test::expect_error_naming([&] { kernels::launch_bias_grad(&dummy, &dummy, 1, 1, 1, DType::i32, nullptr); }, "i32");
}

}  // namespace
}  // namespace ringtrain
