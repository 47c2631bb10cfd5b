// The fused optimizer updates on the GPU: the kernels in kernels/optimizer_kernels, on the
// compute stream.
#include "cuda/compute_stream.hpp"
#include "kernels/optimizer_kernels.hpp"
#include "optim/device_update.hpp"

namespace ringtrain {

void device_sgd_update(float* params, const float* grads, float* velocity, std::int64_t n, float grad_scale,
                       const SgdHyper& hyper) {
  kernels::launch_sgd_update(params, grads, velocity, n, grad_scale, hyper, cuda::compute_stream());
}

void device_adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, float grad_scale,
                         const AdamWHyper& hyper) {
  kernels::launch_adamw_update(params, grads, m, v, n, grad_scale, hyper, cuda::compute_stream());
}

}  // namespace ringtrain
