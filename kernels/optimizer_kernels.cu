// Optimizer update kernels: one thread per element (grid-stride), applying exactly the
// per-element rules the CPU optimizers use (include/ringtrain/optim/update_rules.hpp).
#include "kernels/launch.cuh"
#include "kernels/optimizer_kernels.hpp"

namespace ringtrain::kernels {
namespace {

using detail::grid_start;
using detail::grid_stride;

__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ v, std::int64_t n,
                           float grad_scale, SgdHyper h) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) sgd_update(p[i], g[i] * grad_scale, v[i], h);
}

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, std::int64_t n, float grad_scale, AdamWHyper h) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) adamw_update(p[i], g[i] * grad_scale, m[i], v[i], h);
}

}  // namespace

void launch_sgd_update(float* params, const float* grads, float* velocity, std::int64_t n, float grad_scale,
                       const SgdHyper& hyper, void* stream) {
  detail::launch_elementwise(sgd_kernel, "sgd_kernel", n, stream, params, grads, velocity, n, grad_scale, hyper);
}

void launch_adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, float grad_scale,
                         const AdamWHyper& hyper, void* stream) {
  detail::launch_elementwise(adamw_kernel, "adamw_kernel", n, stream, params, grads, m, v, n, grad_scale, hyper);
}

}  // namespace ringtrain::kernels
