// Non-finite check: a bit test of the exponent per element; threads that find one store 1
// (all writers store the same value, so the race is benign), one store per thread at most.
#include "kernels/launch.cuh"
#include "kernels/scaler_kernels.hpp"

namespace ringtrain::kernels {
namespace {

using namespace detail;

__global__ void find_nonfinite_kernel(const float* __restrict__ x, std::int64_t n, std::int32_t* flag) {
  bool found = false;
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    found |= (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
  if (found) *flag = 1;
}

}  // namespace

void launch_find_nonfinite(const float* x, std::int64_t n, std::int32_t* flag, void* stream) {
  launch_elementwise(find_nonfinite_kernel, "find_nonfinite_kernel", n, stream, x, n, flag);
}

}  // namespace ringtrain::kernels
