// The loss-scale overflow check against a plain loop: finite data (largest normals and
// subnormals included) leaves the flag alone, any Inf or NaN anywhere sets it, and it never
// writes 0. A step's statistics and decision on the device against the host's: the same
// additions in the same order, decide_step's scale. Skips without a GPU.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "kernels/scaler_kernels.hpp"
#include "ringtrain/train/step_decision.hpp"

namespace ringtrain {
namespace {

using test::DeviceBuffer;

std::int32_t run(const std::vector<float>& x, std::int32_t initial) {
  auto dx = DeviceBuffer::of(x);
  auto flag = DeviceBuffer::of(std::vector<std::int32_t>{initial});
  kernels::launch_find_nonfinite(dx.as<float>(), static_cast<std::int64_t>(x.size()), flag.as<std::int32_t>(), nullptr);
  return flag.read<std::int32_t>()[0];
}

bool has_nonfinite(const std::vector<float>& x) {
  for (float v : x)
    if (!std::isfinite(v)) return true;
  return false;
}

TEST(CudaScalerKernels, FlagsInfAndNanAnywhere) {
  RT_SKIP_WITHOUT_GPU();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float kNan = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, test::kBeyondOneGrid}) {
    auto x = test::random_values(n, 41, DType::f32, 1e30f);
    x[0] = std::numeric_limits<float>::max();
    x[n / 2] = -std::numeric_limits<float>::denorm_min();
    for (const auto& [index, value] :
         {std::pair{n - 1, kInf}, std::pair{std::size_t{0}, kNan}, std::pair{n / 2, -kInf}, std::pair{n / 3, -kNan}}) {
      SCOPED_TRACE("n " + std::to_string(n) + " bad value at " + std::to_string(index));
      std::vector<float> bad = x;
      bad[index] = value;
      const std::int32_t expected = has_nonfinite(bad) ? 1 : 0;
      EXPECT_EQ(expected, 1);
      EXPECT_EQ(run(bad, 0), expected);
    }
    SCOPED_TRACE("n " + std::to_string(n) + " all finite");
    EXPECT_EQ(run(x, 0), 0);
    EXPECT_EQ(run(x, 1), 1) << "the kernel must never write 0";
  }
}

TEST(CudaScalerKernels, StepStatisticsAndDecisionAreTheHosts) {
  RT_SKIP_WITHOUT_GPU();
  const std::vector<double> slots{3.25, 5.0, 1.0e-3, 6.0, 2.5e7, 1.0};  // (loss, correct) x 3 micro-batches
  const std::vector<double> range_sums{0.1, 0.7, 1.3e-5, 2.2};          // shard 0: 2 ranges, shard 1: 2
  const std::vector<std::int32_t> shard_ranges{2, 2};
  auto d_slots = DeviceBuffer::of(slots), d_sums = DeviceBuffer::of(range_sums);
  auto d_ranges = DeviceBuffer::of(shard_ranges);
  for (std::int32_t flag : {0, 1})
    for (bool with_sums : {false, true}) {
      SCOPED_TRACE("flag " + std::to_string(flag) + (with_sums ? " with sums" : ""));
      auto d_flag = DeviceBuffer::of(std::vector<std::int32_t>{flag});
      DeviceBuffer d_stats((kStepStatsHeader + 2) * sizeof(double));
      kernels::launch_step_stats(d_slots.as<double>(), 3, 48.0, d_flag.as<std::int32_t>(), d_sums.as<double>(),
                                 d_ranges.as<std::int32_t>(), 2, with_sums, d_stats.as<double>(), nullptr);
      const double loss = ((0.0 + 3.25) + 1.0e-3) + 2.5e7;
      const std::vector<double> expected{loss / 48.0, ((0.0 + 5.0) + 6.0) + 1.0, flag != 0 ? 1.0 : 0.0,
                                         with_sums ? (0.0 + 0.1) + 0.7 : 0.0, with_sums ? (0.0 + 1.3e-5) + 2.2 : 0.0};
      const std::vector<double> got = d_stats.read<double>();
      test::expect_same_bits(got, expected);
      DeviceBuffer d_scale(sizeof(float));
      kernels::launch_decide_step(d_stats.as<double>(), 2, 6.0, 512.0, 0.5, d_scale.as<float>(), nullptr);
      const StepDecision host = decide_step(expected.data(), 2, 6.0, 512.0, 0.5);
      EXPECT_EQ(d_scale.read<float>()[0], host.overflow ? 0.0f : static_cast<float>(host.update_scale));
    }
}

TEST(CudaScalerKernels, NoElementsLaunchNothing) {
  RT_SKIP_WITHOUT_GPU();
  EXPECT_EQ(run({}, 7), 7);
}

}  // namespace
}  // namespace ringtrain
