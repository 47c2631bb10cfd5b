// The elementwise "dst += src" loops the communicators sum with, one per supported dtype,
// plus the dtype check every allreduce path shares. Private to src/comm.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain::comm {

// Plain loops over __restrict pointers: dst and src never alias (src is a receive buffer),
// and saying so lets the compiler vectorize without runtime overlap checks.
inline void add_f32(float* __restrict dst, const float* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

inline void add_f64(double* __restrict dst, const double* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

// Wraps on overflow like MPI_SUM on MPI_INT does in practice; unsigned arithmetic keeps
// that defined behaviour in C++ (signed overflow would be UB and could be miscompiled).
inline void add_i32(std::int32_t* __restrict dst, const std::int32_t* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    dst[i] = static_cast<std::int32_t>(static_cast<std::uint32_t>(dst[i]) + static_cast<std::uint32_t>(src[i]));
}

// Halves: widen to f32, add, round once (nearest even) -- the same rounding on every path,
// so the ring and the MPI user op agree on what one reduction step produces.
inline void add_bf16(std::uint16_t* __restrict dst, const std::uint16_t* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = float_to_bf16(bf16_to_float(dst[i]) + bf16_to_float(src[i]));
}

inline void add_f16(std::uint16_t* __restrict dst, const std::uint16_t* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = float_to_f16(f16_to_float(dst[i]) + f16_to_float(src[i]));
}

inline bool sum_supported(DType dtype) { return dtype != DType::u8; }

inline void require_sum_dtype(DType dtype) {
  RT_REQUIRE(sum_supported(dtype), CommError,
             "allreduce: dtype {} not supported (supported: f32, f64, bf16, f16, i32)", dtype_name(dtype));
}

// dst[0..n) += src[0..n) for `dtype` (already checked by require_sum_dtype).
inline void add_into(void* dst, const void* src, std::size_t n, DType dtype) {
  switch (dtype) {
    case DType::f32: add_f32(static_cast<float*>(dst), static_cast<const float*>(src), n); return;
    case DType::f64: add_f64(static_cast<double*>(dst), static_cast<const double*>(src), n); return;
    case DType::i32:
      add_i32(static_cast<std::int32_t*>(dst), static_cast<const std::int32_t*>(src), n);
      return;
    case DType::bf16:
      add_bf16(static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(src), n);
      return;
    case DType::f16:
      add_f16(static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(src), n);
      return;
    case DType::u8: break;
  }
  require_sum_dtype(dtype);
}

}  // namespace ringtrain::comm
