// The loss-scale overflow check against a plain loop: finite data (largest normals and
// subnormals included) leaves the flag alone, any Inf or NaN anywhere sets it, and it never
// writes 0. Skips without a GPU.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "kernels/scaler_kernels.hpp"

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

TEST(CudaScalerKernels, NoElementsLaunchNothing) {
  RT_SKIP_WITHOUT_GPU();
  EXPECT_EQ(run({}, 7), 7);
}

}  // namespace
}  // namespace ringtrain
