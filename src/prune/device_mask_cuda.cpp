// The pruning mask on the GPU: the mask kernel of kernels/tensor_kernels (checks its launch).
#include "cuda/compute_stream.hpp"
#include "kernels/tensor_kernels.hpp"
#include "prune/device_mask.hpp"

namespace ringtrain {

void device_apply_mask(float* x, const float* mask, std::int64_t n) {
  kernels::launch_apply_mask(x, mask, n, cuda::compute_stream());
}

}  // namespace ringtrain
