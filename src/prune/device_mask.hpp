// Private: the pruning mask applied on the GPU (the mask kernel of kernels/tensor_kernels, on the
// compute stream, after the optimizer's update). Without CUDA: NotCompiled.
#pragma once
#include <cstdint>

namespace ringtrain {

// x[i] = 0 where mask[i] == 0, for the n device elements from x and mask (as the CPU pruner).
void device_apply_mask(float* x, const float* mask, std::int64_t n);

}  // namespace ringtrain
