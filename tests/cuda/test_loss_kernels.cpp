// Fused softmax cross-entropy and its batch sums against the CPU SoftmaxCrossEntropy
// (src/nn/loss.cpp): per-row loss and arg-max from one-row CPU passes, the gradient from the
// whole batch, in f32, bf16 and f16 on poisoned outputs, by the warp-per-row kernel and the
// block-per-row one for wide rows. Skips without a GPU (dtype checks aside).
#include <cmath>
#include <string>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "kernels/loss_kernels.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain {
namespace {

using test::DeviceBuffer;
using test::kFloatDTypes;

struct CpuLoss {
  std::vector<float> row_loss, dlogits;
  std::vector<std::int32_t> row_correct;
  double mean = 0.0;
  std::int64_t correct = 0;
};

CpuLoss cpu_loss(std::vector<float> logits, const std::vector<std::int32_t>& labels, std::int64_t k) {
  const auto n = static_cast<std::int64_t>(labels.size());
  CpuLoss r;
  r.dlogits.resize(logits.size());
  SoftmaxCrossEntropy batch;
  Tensor z = Tensor::wrap(logits.data(), Shape{n, k}), dz = Tensor::wrap(r.dlogits.data(), Shape{n, k});
  r.mean = batch.forward(z, labels.data());
  r.correct = batch.correct();
  batch.backward(dz);
  SoftmaxCrossEntropy one;
  for (std::int64_t i = 0; i < n; ++i) {
    Tensor row = Tensor::wrap(logits.data() + i * k, Shape{1, k});
    r.row_loss.push_back(static_cast<float>(one.forward(row, labels.data() + i)));
    r.row_correct.push_back(static_cast<std::int32_t>(one.correct()));
  }
  return r;
}

std::vector<std::int32_t> random_labels(std::size_t n, std::int64_t k, std::uint64_t seed) {
  Rng rng(stream_key(seed));
  std::vector<std::int32_t> labels(n);
  for (auto& l : labels) l = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(k)));
  return labels;
}

struct Case {
  std::size_t n;
  std::int64_t k;
};

TEST(CudaLossKernels, SoftmaxXentMatchesCpu) {
  RT_SKIP_WITHOUT_GPU();
  // k = 1 (loss 0), k < 32 (idle lanes), k > 32 (lanes loop), 10^6 rows (grid-stride); from
  // 2048 classes a block per row: the threshold, and GPT-2's odd vocabulary of 50257.
  for (DType dtype : kFloatDTypes)
    for (const Case& c : {Case{1, 10}, Case{7, 1}, Case{7, 1000}, Case{1003, 37}, Case{1'000'003, 10}, Case{5, 2048},
                          Case{40, 50257}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k));
      const auto logits = test::random_values(c.n * static_cast<std::size_t>(c.k), 11, dtype, 4.0f);
      const auto labels = random_labels(c.n, c.k, 12);
      const CpuLoss ref = cpu_loss(logits, labels, c.k);

      auto dz = DeviceBuffer::of_values(logits, dtype);
      auto dl = DeviceBuffer::of(labels);
      DeviceBuffer dd(logits.size() * dtype_size(dtype)), loss(c.n * sizeof(float)),
          correct(c.n * sizeof(std::int32_t));
      const auto n = static_cast<std::int64_t>(c.n);
      // grad_scale 1/4 instead of the CPU's 1/n (undone here) keeps 16-bit gradients of a 10^6
      // batch out of f16's subnormal range, where one ulp would exceed the bound.
      constexpr float kGradScale = 0.25f;
      std::vector<float> ref_d = ref.dlogits;
      for (float& d : ref_d) d = test::round_to(dtype, d * static_cast<float>(n) * kGradScale);
      kernels::launch_softmax_xent(dz.get(), dtype, dl.as<std::int32_t>(), n, c.k, kGradScale, dd.get(),
                                   loss.as<float>(), correct.as<std::int32_t>(), nullptr);
      test::expect_close(dd.read_values(dtype), ref_d, test::tolerance(dtype));
      // The loss is computed in float from the same inputs whatever the dtype: f32's bound.
      test::expect_close(loss.read<float>(), ref.row_loss, test::kTolF32);
      test::expect_same_bits(correct.read<std::int32_t>(), ref.row_correct);

      DeviceBuffer sums(2 * sizeof(double));
      kernels::launch_loss_sums(loss.as<float>(), correct.as<std::int32_t>(), n, sums.as<double>(), nullptr);
      const auto first = sums.read<double>();
      EXPECT_LT(test::rel_error(first[0], ref.mean * static_cast<double>(n)), test::kTolF32);
      EXPECT_EQ(first[1], static_cast<double>(ref.correct));
      sums.poison();
      kernels::launch_loss_sums(loss.as<float>(), correct.as<std::int32_t>(), n, sums.as<double>(), nullptr);
      const auto second = sums.read<double>();
      test::expect_same_bits(second, first);  // deterministic
    }
}

TEST(CudaLossKernels, TiesPickTheFirstIndex) {
  RT_SKIP_WITHOUT_GPU();
  // Row 0: the maximum at 3 and at k - 24 (other lanes, or threads, and passes); row 1: all
  // equal. 64 classes: a warp per row; 8192: a block per row.
  for (const std::int64_t k : {64, 8192}) {
    std::vector<float> logits(static_cast<std::size_t>(2 * k), 0.5f);
    logits[3] = logits[static_cast<std::size_t>(k - 24)] = 2.0f;
    const std::vector<std::int32_t> labels = {3, 0};
    auto dz = DeviceBuffer::of(logits);
    auto dl = DeviceBuffer::of(labels);
    DeviceBuffer dd(logits.size() * sizeof(float)), loss(2 * sizeof(float)), correct(2 * sizeof(std::int32_t));
    kernels::launch_softmax_xent(dz.get(), DType::f32, dl.as<std::int32_t>(), 2, k, 1.0f, dd.get(), loss.as<float>(),
                                 correct.as<std::int32_t>(), nullptr);
    EXPECT_EQ(correct.read<std::int32_t>(), cpu_loss(logits, labels, k).row_correct) << k;
    EXPECT_EQ(correct.read<std::int32_t>(), (std::vector<std::int32_t>{1, 1})) << k;
  }
}

TEST(CudaLossKernels, LabelOutsideTheClassesGivesNanLossAndNoOneHot) {
  RT_SKIP_WITHOUT_GPU();
  const std::int64_t k = 10;
  const std::vector<std::int32_t> labels = {-1, 10, 3};
  const auto logits = test::random_values(labels.size() * k, 13);
  // Reference: the CPU gradient for label 0, with the one-hot's -grad_scale taken back.
  const float grad_scale = 0.5f;
  const CpuLoss with_zero = cpu_loss(logits, {0, 0, 3}, k);
  std::vector<float> ref(logits.size());
  for (std::size_t i = 0; i < ref.size(); ++i) {
    ref[i] = with_zero.dlogits[i] * 3.0f * grad_scale;  // CPU scales by 1/n = 1/3
    if (i == 0 || i == static_cast<std::size_t>(k)) ref[i] += grad_scale;
  }
  auto dz = DeviceBuffer::of(logits);
  auto dl = DeviceBuffer::of(labels);
  DeviceBuffer dd(logits.size() * sizeof(float)), loss(3 * sizeof(float)), correct(3 * sizeof(std::int32_t));
  kernels::launch_softmax_xent(dz.get(), DType::f32, dl.as<std::int32_t>(), 3, k, grad_scale, dd.get(),
                               loss.as<float>(), correct.as<std::int32_t>(), nullptr);
  test::expect_close(dd.read<float>(), ref, test::kTolF32);
  const auto l = loss.read<float>();
  EXPECT_TRUE(std::isnan(l[0]));
  EXPECT_TRUE(std::isnan(l[1]));
  EXPECT_LT(test::rel_error(l[2], with_zero.row_loss[2]), test::kTolF32);
  const auto ok = correct.read<std::int32_t>();
  EXPECT_EQ(ok[0], 0);
  EXPECT_EQ(ok[1], 0);
  EXPECT_EQ(ok[2], with_zero.row_correct[2]);
}

TEST(CudaLossKernels, NoRowsLaunchNothingAndSumToZero) {
  RT_SKIP_WITHOUT_GPU();
  DeviceBuffer poisoned(16), sums(2 * sizeof(double));
  for (DType dtype : kFloatDTypes)
    kernels::launch_softmax_xent(poisoned.get(), dtype, poisoned.as<std::int32_t>(), 0, 10, 1.0f, poisoned.get(),
                                 poisoned.as<float>(), poisoned.as<std::int32_t>(), nullptr);
  EXPECT_EQ(poisoned.read<std::uint8_t>(), std::vector<std::uint8_t>(16, 0xff));
  kernels::launch_loss_sums(nullptr, nullptr, 0, sums.as<double>(), nullptr);
  EXPECT_EQ(sums.read<double>(), (std::vector<double>{0.0, 0.0}));
}

TEST(CudaLossKernels, UnsupportedDtypeThrowsNamingIt) {
  float dummy = 0.0f;
  std::int32_t label = 0;
  test::expect_error_naming(
      [&] { kernels::launch_softmax_xent(&dummy, DType::f64, &label, 1, 1, 1.0f, &dummy, &dummy, &label, nullptr); },
      "f64");
}

}  // namespace
}  // namespace ringtrain
