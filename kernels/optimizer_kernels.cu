// Optimizer update kernels: grid-stride, float4 vectors when every arena is 16-byte aligned,
// applying exactly the per-element rules the CPU optimizers use
// (include/ringtrain/optim/update_rules.hpp), and writing the model's compute copy of each
// updated parameter when asked (the master-to-bf16 cast folded into the update's pass).
#include <cstdint>
#include <initializer_list>

#include "kernels/launch.cuh"
#include "kernels/optimizer_kernels.hpp"

namespace ringtrain::kernels {
namespace {

constexpr int kF32Vector = detail::kPack<float>;
using F32Vector = detail::Vec<float, kF32Vector>;

// The compute copy as the kernels take it: 0 none, 1 bf16, 2 f16.
struct CopyOut {
  void* data = nullptr;
  int kind = 0;
};

CopyOut copy_out(const ComputeCopyOut& c) {
  if (c.data == nullptr) return {};
  RT_REQUIRE(c.dtype == DType::bf16 || c.dtype == DType::f16, Error,
             "optimizer update: a compute copy in {} (bf16 or f16)", dtype_name(c.dtype));
  return {c.data, c.dtype == DType::bf16 ? 1 : 2};
}

// Every arena of an update 16-byte aligned (the compute copy 8-byte): the kernel moves float4
// vectors (and 4-element vectors of the copy).
bool all_aligned(std::initializer_list<const void*> arenas, const CopyOut& copy) {
  for (const void* a : arenas)
    if (!detail::aligned_to(a, sizeof(F32Vector))) return false;
  return copy.data == nullptr || detail::aligned_to(copy.data, 4 * sizeof(std::uint16_t));
}

template <typename T>
__device__ inline void store_copy(void* data, std::int64_t i, float p) {
  static_cast<T*>(data)[i] = detail::from_float<T>(p);
}

template <typename T>
__device__ inline void store_copy_vector(void* data, std::int64_t vector, const F32Vector& p) {
  detail::Vec<T, kF32Vector> out;
  for (int k = 0; k < kF32Vector; ++k) out.v[k] = detail::from_float<T>(p.v[k]);
  reinterpret_cast<detail::Vec<T, kF32Vector>*>(data)[vector] = out;
}

__device__ inline void write_copy(const CopyOut& c, std::int64_t i, float p) {
  if (c.kind == 1) store_copy<__nv_bfloat16>(c.data, i, p);
  if (c.kind == 2) store_copy<__half>(c.data, i, p);
}

__device__ inline void write_copy_vector(const CopyOut& c, std::int64_t vector, const F32Vector& p) {
  if (c.kind == 1) store_copy_vector<__nv_bfloat16>(c.data, vector, p);
  if (c.kind == 2) store_copy_vector<__half>(c.data, vector, p);
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
                           float grad_scale, SgdHyper h, bool vectorized, const float* device_scale, CopyOut copy) {
  if (!effective_scale(grad_scale, device_scale, &grad_scale)) return;
  detail::for_each_vector<kF32Vector>(
      n, vectorized,
      [&](std::int64_t i) {
        F32Vector pv = reinterpret_cast<F32Vector*>(p)[i], vv = reinterpret_cast<F32Vector*>(v)[i];
        const F32Vector gv = reinterpret_cast<const F32Vector*>(g)[i];
        for (int k = 0; k < kF32Vector; ++k) sgd_update(pv.v[k], gv.v[k] * grad_scale, vv.v[k], h);
        reinterpret_cast<F32Vector*>(p)[i] = pv;
        reinterpret_cast<F32Vector*>(v)[i] = vv;
        write_copy_vector(copy, i, pv);
      },
      [&](std::int64_t i) {
        sgd_update(p[i], g[i] * grad_scale, v[i], h);
        write_copy(copy, i, p[i]);
      });
}

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, std::int64_t n, float grad_scale, AdamWHyper h, bool vectorized,
                             const float* device_scale, CopyOut copy) {
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
        write_copy_vector(copy, i, pv);
      },
      [&](std::int64_t i) {
        adamw_update(p[i], g[i] * grad_scale, m[i], v[i], h);
        write_copy(copy, i, p[i]);
      });
}

}  // namespace

void launch_sgd_update(float* params, const float* grads, float* velocity, std::int64_t n, float grad_scale,
                       const SgdHyper& hyper, void* stream, const float* device_scale, ComputeCopyOut copy) {
  const CopyOut out = copy_out(copy);
  const bool vectorized = all_aligned({params, grads, velocity}, out);
  detail::launch_vectorized<kF32Vector>(sgd_kernel, "sgd_kernel", n, vectorized, stream, params, grads, velocity, n,
                                        grad_scale, hyper, vectorized, device_scale, out);
}

void launch_adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, float grad_scale,
                         const AdamWHyper& hyper, void* stream, const float* device_scale, ComputeCopyOut copy) {
  const CopyOut out = copy_out(copy);
  const bool vectorized = all_aligned({params, grads, m, v}, out);
  detail::launch_vectorized<kF32Vector>(adamw_kernel, "adamw_kernel", n, vectorized, stream, params, grads, m, v, n,
                                        grad_scale, hyper, vectorized, device_scale, out);
}

}  // namespace ringtrain::kernels
