// Optimizer update kernels: one thread per element (grid-stride), applying exactly the
// per-element rules the CPU optimizers use (include/ringtrain/optim/update_rules.hpp).
#include <cuda_runtime.h>

#include "kernels/optimizer_kernels.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::kernels {
namespace {

__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ v,
                           std::int64_t n, SgdHyper h) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    sgd_update(p[i], g[i], v[i], h);
}

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, std::int64_t n, AdamWHyper h) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    adamw_update(p[i], g[i], m[i], v[i], h);
}

constexpr int kThreads = 256;

unsigned grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

void check_launch(const char* name) {
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) throw Error(fmt::format("{} launch failed: {}", name, cudaGetErrorString(rc)));
}

}  // namespace

void launch_sgd_update(float* params, const float* grads, float* velocity, std::int64_t n, const SgdHyper& hyper,
                       void* stream) {
  if (n == 0) return;
  sgd_kernel<<<grid_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(params, grads, velocity, n, hyper);
  check_launch("sgd_kernel");
}

void launch_adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n,
                         const AdamWHyper& hyper, void* stream) {
  if (n == 0) return;
  adamw_kernel<<<grid_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(params, grads, m, v, n, hyper);
  check_launch("adamw_kernel");
}

}  // namespace ringtrain::kernels
