// Optimizer update kernels: grid-stride, float4 vectors when every arena is 16-byte aligned,
// applying exactly the per-element rules the CPU optimizers use
// (include/ringtrain/optim/update_rules.hpp).
#include <initializer_list>

#include "kernels/launch.cuh"
#include "kernels/optimizer_kernels.hpp"

namespace ringtrain::kernels {
namespace {

constexpr int kF32Vector = detail::kPack<float>;
using F32Vector = detail::Vec<float, kF32Vector>;

// Every arena of an update 16-byte aligned: the kernel moves float4 vectors.
bool all_aligned(std::initializer_list<const void*> arenas) {
  for (const void* a : arenas)
    if (!detail::aligned_to(a, sizeof(F32Vector))) return false;
  return true;
}

// grad_scale times the device scale when there is one; false: the update is skipped.
__device__ inline bool effective_scale(float grad_scale, const float* device_scale, float* scale) {
  *scale = grad_scale;
  if (device_scale == nullptr) return true;
  const float d = *device_scale;
  *scale = grad_scale * d;
  return d != 0.0f;
}

__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ v, std::int64_t n,
                           float grad_scale, SgdHyper h, bool vectorized, const float* device_scale) {
  if (!effective_scale(grad_scale, device_scale, &grad_scale)) return;
  detail::for_each_vector<kF32Vector>(
      n, vectorized,
      [&](std::int64_t i) {
        F32Vector pv = reinterpret_cast<F32Vector*>(p)[i], vv = reinterpret_cast<F32Vector*>(v)[i];
        const F32Vector gv = reinterpret_cast<const F32Vector*>(g)[i];
        for (int k = 0; k < kF32Vector; ++k) sgd_update(pv.v[k], gv.v[k] * grad_scale, vv.v[k], h);
        reinterpret_cast<F32Vector*>(p)[i] = pv;
        reinterpret_cast<F32Vector*>(v)[i] = vv;
      },
      [&](std::int64_t i) { sgd_update(p[i], g[i] * grad_scale, v[i], h); });
}

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, std::int64_t n, float grad_scale, AdamWHyper h, bool vectorized,
                             const float* device_scale) {
  if (!effective_scale(grad_scale, device_scale, &grad_scale)) return;
  detail::for_each_vector<kF32Vector>(
      n, vectorized,
      [&](std::int64_t i) {
        F32Vector pv = reinterpret_cast<F32Vector*>(p)[i], mv = reinterpret_cast<F32Vector*>(m)[i],
                  vv = reinterpret_cast<F32Vector*>(v)[i];
        const F32Vector gv = reinterpret_cast<const F32Vector*>(g)[i];
        for (int k = 0; k < kF32Vector; ++k) adamw_update(pv.v[k], gv.v[k] * grad_scale, mv.v[k], vv.v[k], h);
        reinterpret_cast<F32Vector*>(p)[i] = pv;
        reinterpret_cast<F32Vector*>(m)[i] = mv;
        reinterpret_cast<F32Vector*>(v)[i] = vv;
      },
      [&](std::int64_t i) { adamw_update(p[i], g[i] * grad_scale, m[i], v[i], h); });
}

}  // namespace

void launch_sgd_update(float* params, const float* grads, float* velocity, std::int64_t n, float grad_scale,
                       const SgdHyper& hyper, void* stream, const float* device_scale) {
  const bool vectorized = all_aligned({params, grads, velocity});
  detail::launch_vectorized<kF32Vector>(sgd_kernel, "sgd_kernel", n, vectorized, stream, params, grads, velocity, n,
                                        grad_scale, hyper, vectorized, device_scale);
}

void launch_adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, float grad_scale,
                         const AdamWHyper& hyper, void* stream, const float* device_scale) {
  const bool vectorized = all_aligned({params, grads, m, v});
  detail::launch_vectorized<kF32Vector>(adamw_kernel, "adamw_kernel", n, vectorized, stream, params, grads, m, v, n,
                                        grad_scale, hyper, vectorized, device_scale);
}

}  // namespace ringtrain::kernels
