// Private to kernels/: grid-stride launch helpers, launch checks, dtype dispatch, the
// device-side f32/bf16/f16 loads and stores, vectorised element-wise loops and maps with
// 16-byte accesses. Stores round to nearest even and give NaNs the same bits as dtype.hpp's
// float_to_bf16/float_to_f16, so device results match the host's.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain::kernels::detail {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 65535;

inline cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Blocks for `work` independent items of kThreads each (at least 1, at most kMaxBlocks;
// the kernels cover the rest with grid-stride loops).
inline unsigned grid_for(std::int64_t work) {
  const std::int64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks < kMaxBlocks ? blocks : kMaxBlocks));
}

inline void check_launch(const char* name) {
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) throw Error(fmt::format("{} launch failed: {}", name, cudaGetErrorString(rc)));
}

inline void require_count(const char* name, std::int64_t n) {
  RT_REQUIRE(n >= 0, Error, "{}: negative element count {}", name, n);
}

// Launches kernel over n elements (grid-stride) on stream; n == 0 launches nothing.
template <typename... Params, typename... Args>
void launch_elementwise(void (*kernel)(Params...), const char* name, std::int64_t n, void* stream, Args&&... args) {
  require_count(name, n);
  if (n == 0) return;
  kernel<<<grid_for(n), kThreads, 0, as_stream(stream)>>>(std::forward<Args>(args)...);
  check_launch(name);
}

// Blocks of kThreads columns by up to kMaxBlocks rows, for kernels with columns across x and
// rows across y (grid-stride over the rows).
inline dim3 column_row_grid(std::int64_t columns, std::int64_t rows) {
  const std::int64_t x = (columns + kThreads - 1) / kThreads;
  const std::int64_t y = rows < 1 ? 1 : (rows < kMaxBlocks ? rows : kMaxBlocks);
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
}

constexpr int kWarp = 32;

// The sum of v over the warp's 32 lanes by a butterfly: every lane gets the same bits.
template <typename V>
__device__ inline V warp_sum(V v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ inline std::int64_t grid_start() { return blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; }
__device__ inline std::int64_t grid_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

// One warp per row: the grid for `rows` rows, this warp's first row and the warps in the grid
// (the kernel strides over rows by warp_count()).
inline unsigned warp_grid(std::int64_t rows) { return grid_for(rows * kWarp); }
__device__ inline std::int64_t warp_index() { return grid_start() / kWarp; }
__device__ inline std::int64_t warp_count() { return grid_stride() / kWarp; }

// Calls f(T{}) with T the device type of an activation dtype (float, __nv_bfloat16, __half);
// any other dtype throws Error naming it and the caller.
template <typename F>
void dispatch_float(DType dtype, const char* name, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::bf16: return f(__nv_bfloat16{});
    case DType::f16: return f(__half{});
    default: throw Error(fmt::format("{}: unsupported dtype {} (f32, bf16 or f16)", name, dtype_name(dtype)));
  }
}

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__nv_bfloat16 x) {
  return __uint_as_float(static_cast<unsigned>(__bfloat16_as_ushort(x)) << 16);
}
// NaNs keep sign and payload as in f16_to_float (hardware conversion may canonicalize them).
__device__ inline float to_float(__half x) {
  const unsigned h = __half_as_ushort(x);
  if ((h & 0x7fffu) > 0x7c00u) return __uint_as_float(((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13));
  return __half2float(x);
}

template <typename T>
__device__ T from_float(float f);
template <>
__device__ inline float from_float<float>(float f) {
  return f;
}
// Finite values and infinities: the hardware's round-to-nearest-even; NaNs as float_to_bf16
// (quiet, sign and payload kept) instead of the hardware's canonical NaN.
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __ushort_as_bfloat16(static_cast<unsigned short>((u >> 16) | 0x40u));
  return __float2bfloat16_rn(f);
}
template <>
__device__ inline __half from_float<__half>(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return __ushort_as_half(static_cast<unsigned short>(((u >> 16) & 0x8000u) | 0x7e00u));
  return __float2half_rn(f);
}

// ---- vectorised element-wise loops ----------------------------------------------------------
// K consecutive elements of T moved as one access (aligned as a whole: a 16-byte Vec is one
// 128-bit load or store, a 32-byte one two).
template <typename T, int K>
struct alignas(sizeof(T) * K) Vec {
  T v[K];
};

// Elements of T in one 16-byte access.
template <typename T>
constexpr int kPack = 16 / static_cast<int>(sizeof(T));

inline bool aligned_to(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// Grid-stride over n elements: when `vectorized`, vector(p) for each whole vector p < n / K
// (elements K*p .. K*p + K - 1), then one(i) for the n % K left; otherwise one(i) for every
// element. No integer division per element.
template <int K, typename Vector, typename One>
__device__ inline void for_each_vector(std::int64_t n, bool vectorized, const Vector& vector, const One& one) {
  std::int64_t done = 0;
  if (vectorized) {
    const std::int64_t vectors = n / K;
    for (std::int64_t p = grid_start(); p < vectors; p += grid_stride()) vector(p);
    done = vectors * K;
  }
  for (std::int64_t i = done + grid_start(); i < n; i += grid_stride()) one(i);
}

// Launches kernel for n elements taken K at a time when `vectorized` (grid-stride, so one thread
// per vector up to the grid's limit); n == 0 launches nothing.
template <int K, typename... Params, typename... Args>
void launch_vectorized(void (*kernel)(Params...), const char* name, std::int64_t n, bool vectorized, void* stream,
                       Args&&... args) {
  require_count(name, n);
  if (n == 0) return;
  const std::int64_t work = vectorized ? (n + K - 1) / K : n;
  kernel<<<grid_for(work), kThreads, 0, as_stream(stream)>>>(std::forward<Args>(args)...);
  check_launch(name);
}

// ---- element-wise maps: out[i] = op(a[i]) or op(a[i], b[i]) ---------------------------------
// When every pointer is 16-byte aligned each thread moves whole 16-byte packs (4 f32 or 8
// bf16/f16 values); otherwise every element goes one by one. op is a functor with
// `__device__ T operator()(T...) const` (computed in float by the caller's functor); out may
// alias an input (each element is read before it is written).

// Unary (b == nullptr) or binary map: out[i] = op(a[i]) or op(a[i], b[i]).
template <typename T, typename Op>
__device__ inline T apply(const Op& op, T a, const T* b, std::int64_t i) {
  if constexpr (Op::kInputs == 1) {
    return op(a);
  } else {
    return op(a, b[i]);
  }
}

template <typename T, typename Op>
__global__ void map_kernel(T* out, const T* a, const T* b, std::int64_t n, bool packed, Op op) {
  constexpr int kSize = kPack<T>;
  using V = Vec<T, kSize>;
  for_each_vector<kSize>(
      n, packed,
      [&](std::int64_t p) {
        const V x = reinterpret_cast<const V*>(a)[p];
        V y;
        if constexpr (Op::kInputs == 1) {
          for (int k = 0; k < kSize; ++k) y.v[k] = op(x.v[k]);
        } else {
          const V z = reinterpret_cast<const V*>(b)[p];
          for (int k = 0; k < kSize; ++k) y.v[k] = op(x.v[k], z.v[k]);
        }
        reinterpret_cast<V*>(out)[p] = y;
      },
      [&](std::int64_t i) { out[i] = apply(op, a[i], b, i); });
}

// Launches map_kernel over n elements on stream (nothing when n == 0); b is null for a unary op
// (Op::kInputs == 1).
template <typename T, typename Op>
void launch_map(const char* name, Op op, T* out, const T* a, const T* b, std::int64_t n, void* stream) {
  const bool packed = aligned_to(out, 16) && aligned_to(a, 16) && (b == nullptr || aligned_to(b, 16));
  launch_vectorized<kPack<T>>(map_kernel<T, Op>, name, n, packed, stream, out, a, b, n, packed, op);
}

}  // namespace ringtrain::kernels::detail
