// The fused optimizer updates and the pruning mask on the GPU: the kernels of
// kernels/optimizer_kernels and kernels/tensor_kernels, on the compute stream (so they follow
// the step's backward and the gradient allreduce's wait).
#include "cuda/compute_stream.hpp"
#include "cuda/cuda_backend.hpp"
#include "kernels/optimizer_kernels.hpp"
#include "kernels/tensor_kernels.hpp"
#include "ringtrain/optim/update_rules.hpp"

namespace ringtrain::cuda {

void CudaBackend::sgd_update(float* params, const float* grads, float* velocity, std::int64_t n, float grad_scale,
                             const float* device_scale, const ComputeCopyOut& copy, const SgdHyper& hyper) const {
  kernels::launch_sgd_update(params, grads, velocity, n, grad_scale, hyper, compute_stream(), device_scale, copy);
}

void CudaBackend::adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, float grad_scale,
                               const float* device_scale, const ComputeCopyOut& copy, const AdamWHyper& hyper) const {
  kernels::launch_adamw_update(params, grads, m, v, n, grad_scale, hyper, compute_stream(), device_scale, copy);
}

void CudaBackend::apply_mask(float* x, const float* mask, std::int64_t n) const {
  kernels::launch_apply_mask(x, mask, n, compute_stream());
}

}  // namespace ringtrain::cuda
