// The elementwise loops every allreduce path sums with: one codec per (dtype, wire dtype) that
// says how an element is stored, sent and summed, the kernels written once over the codecs,
// and the dtype checks all paths share. Private to src/comm.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/dtype.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ringtrain::comm {

// A codec: Data is the element as the caller stores it, Wire as it travels between ranks,
// Acc what sums are accumulated in. to_data rounds a sum through the wire type, so the rank
// that reduced an element keeps exactly the value its peers receive (bitwise identical
// results on all ranks, whatever the wire type).

// f32, f64: stored, sent and summed as themselves.
template <typename T>
struct PlainCodec {
  using Data = T;
  using Wire = T;
  using Acc = T;
  static Acc widen(Data v) { return v; }
  static Acc from_wire(Wire v) { return v; }
  static Wire to_wire(Acc v) { return v; }
  static Data to_data(Acc v) { return v; }
};

// Wraps on overflow like MPI_SUM on MPI_INT does in practice; unsigned arithmetic keeps that
// defined behaviour in C++ (signed overflow would be UB and could be miscompiled).
struct I32Codec {
  using Data = std::int32_t;
  using Wire = std::int32_t;
  using Acc = std::uint32_t;
  static Acc widen(Data v) { return static_cast<Acc>(v); }
  static Acc from_wire(Wire v) { return static_cast<Acc>(v); }
  static Wire to_wire(Acc v) { return static_cast<Wire>(v); }
  static Data to_data(Acc v) { return static_cast<Data>(v); }
};

// Halves: widened to f32, summed, rounded once (nearest even) per reduction step -- the same
// rounding on every path, so the ring, the shared-memory path and the MPI user op agree.
template <float (*kToFloat)(std::uint16_t), std::uint16_t (*kFromFloat)(float)>
struct HalfCodec {
  using Data = std::uint16_t;
  using Wire = std::uint16_t;
  using Acc = float;
  static Acc widen(Data v) { return kToFloat(v); }
  static Acc from_wire(Wire v) { return kToFloat(v); }
  static Wire to_wire(Acc v) { return kFromFloat(v); }
  static Data to_data(Acc v) { return kFromFloat(v); }
};
using Bf16Codec = HalfCodec<bf16_to_float, float_to_bf16>;
using F16Codec = HalfCodec<f16_to_float, float_to_f16>;

// f32 data sent as bf16 (comm.wire_dtype = "bf16"): half the bytes on the wire; sums stay f32
// where they are formed and are rounded to bf16 only to travel.
struct F32AsBf16Codec {
  using Data = float;
  using Wire = std::uint16_t;
  using Acc = float;
  static Acc widen(Data v) { return v; }
  static Acc from_wire(Wire v) { return bf16_to_float(v); }
  static Wire to_wire(Acc v) { return float_to_bf16(v); }
  static Data to_data(Acc v) { return bf16_to_float(float_to_bf16(v)); }
};

// The dtype data of `dtype` travels as when the communicator's wire dtype is `wire`: only f32
// is ever compressed.
constexpr DType wire_dtype_for(DType dtype, DType wire) { return dtype == DType::f32 ? wire : dtype; }

inline bool sum_supported(DType dtype) { return dtype != DType::u8; }

// `op` names the collective in the error.
inline void require_sum_dtype(DType dtype, std::string_view op = "allreduce") {
  RT_REQUIRE(sum_supported(dtype), CommError, "{}: dtype {} not supported (supported: f32, f64, bf16, f16, i32)", op,
             dtype_name(dtype));
}

// Calls f(Codec{}) with the codec for `dtype` travelling as `wire` (from wire_dtype_for);
// dtype was checked by require_sum_dtype.
template <typename F>
void with_codec(DType dtype, DType wire, F&& f) {
  switch (dtype) {
    case DType::f32:
      if (wire == DType::bf16) return f(F32AsBf16Codec{});
      return f(PlainCodec<float>{});
    case DType::f64: return f(PlainCodec<double>{});
    case DType::i32: return f(I32Codec{});
    case DType::bf16: return f(Bf16Codec{});
    case DType::f16: return f(F16Codec{});
    case DType::u8: break;
  }
  require_sum_dtype(dtype);
}

// Calls f(Codec{}) with a codec that moves elements of `dtype` as their bits, never summed
// (allgather: data travels as itself, whatever the wire dtype). Any dtype.
template <typename F>
void with_copy_codec(DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 1: return f(PlainCodec<std::uint8_t>{});
    case 2: return f(PlainCodec<std::uint16_t>{});
    case 4: return f(PlainCodec<std::uint32_t>{});
    case 8: return f(PlainCodec<std::uint64_t>{});
    default: break;
  }
  throw CommError(fmt::format("allgather: dtype {} of {} bytes not supported", dtype_name(dtype), dtype_size(dtype)));
}

// A rank's own element as it enters a sum formed elsewhere too: rounded as if it had travelled,
// so that a sum does not depend on which rank forms it (own data is otherwise not rounded).
template <typename C>
typename C::Acc as_sent(typename C::Data v) {
  if constexpr (std::is_same_v<typename C::Data, typename C::Wire>)
    return C::widen(v);
  else
    return C::from_wire(C::to_wire(C::widen(v)));
}

// The kernels. Pointers are __restrict: sources are receive or staging buffers, never the
// destination, and saying so lets the compiler vectorize without overlap checks.

// dst[0..bytes) = src[0..bytes) with plain vector loads and stores. Not memcpy: glibc moves
// such sizes with `rep movsb`, which on our (AMD, virtualized) machines drops to ~3 GB/s for
// some pairs of buffers (128-256 KiB copies measured at 3 GB/s against 35 GB/s for this loop).
inline void copy_bytes(void* __restrict dst, const void* __restrict src, std::size_t bytes) {
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  std::size_t i = 0;
#if defined(__SSE2__)
  for (; i + 64 <= bytes; i += 64) {
    const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i v2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i v3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), v0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 16), v1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 32), v2);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 48), v3);
  }
#endif
  std::memcpy(d + i, s + i, bytes - i);
}

// How a kernel writes a destination that other ranks read: plain stores leave the lines in
// this core's cache, streaming stores send them to memory (ShmAllreduce says when that pays).
enum class Store { plain, stream };

// Elements a kernel handles at a time where it works through an L1-resident block.
inline constexpr std::size_t kBlockElems = 512;

// copy_bytes with streaming stores where the destination is 16-byte aligned. Streaming stores
// are weakly ordered: store_fence() before publishing that the data is there.
inline void stream_bytes(void* __restrict dst, const void* __restrict src, std::size_t bytes) {
#if defined(__SSE2__)
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  const std::size_t misalign = reinterpret_cast<std::uintptr_t>(d) % 16;
  std::size_t i = misalign == 0 ? 0 : (16 - misalign < bytes ? 16 - misalign : bytes);
  copy_bytes(d, s, i);
  for (; i + 64 <= bytes; i += 64) {
    const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i v2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i v3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), v0);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), v1);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), v2);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), v3);
  }
  copy_bytes(d + i, s + i, bytes - i);
#else
  copy_bytes(dst, src, bytes);
#endif
}

// Orders every earlier store, streaming ones included, before any later store.
inline void store_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#else
  std::atomic_thread_fence(std::memory_order_release);
#endif
}

inline void store_bytes(Store store, void* __restrict dst, const void* __restrict src, std::size_t bytes) {
  if (store == Store::stream)
    stream_bytes(dst, src, bytes);
  else
    copy_bytes(dst, src, bytes);
}

// wire[0..n) = data[0..n) as it travels. Streamed conversions go through an L1 block.
template <typename C>
void encode(typename C::Wire* __restrict wire, const typename C::Data* __restrict data, std::size_t n,
            Store store = Store::plain) {
  if constexpr (std::is_same_v<typename C::Data, typename C::Wire>) {
    store_bytes(store, wire, data, n * sizeof(typename C::Data));
  } else if (store == Store::plain) {
    for (std::size_t i = 0; i < n; ++i) wire[i] = C::to_wire(C::widen(data[i]));
  } else {
    typename C::Wire block[kBlockElems];
    for (std::size_t b = 0; b < n; b += kBlockElems) {
      const std::size_t m = n - b < kBlockElems ? n - b : kBlockElems;
      for (std::size_t i = 0; i < m; ++i) block[i] = C::to_wire(C::widen(data[b + i]));
      stream_bytes(wire + b, block, m * sizeof(typename C::Wire));
    }
  }
}

// data[0..n) = the values wire[0..n) carry.
template <typename C>
void decode(typename C::Data* __restrict data, const typename C::Wire* __restrict wire, std::size_t n) {
  if constexpr (std::is_same_v<typename C::Data, typename C::Wire>) {
    copy_bytes(data, wire, n * sizeof(typename C::Data));
  } else {
    for (std::size_t i = 0; i < n; ++i) data[i] = C::to_data(C::from_wire(wire[i]));
  }
}

// data[0..n) += wire[0..n), rounded as the sum will travel on.
template <typename C>
void accumulate(typename C::Data* __restrict data, const typename C::Wire* __restrict wire, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) data[i] = C::to_data(C::widen(data[i]) + C::from_wire(wire[i]));
}

// The sum of nsrc+1 contributions in rank order: the `nsrc` sources (wire elements, srcs[j]
// pointing at element 0, the peers in rank order) with data[0..n) (as_sent) taking place
// `own_at` among them. The same order wherever a sum is formed, so every rank would form it
// bitwise alike. Written back to data and, as it travels, to out with `store`. Summed in
// L1-sized blocks so that every source is read once whatever the source count; one source
// (two ranks: a + b == b + a) with plain stores is one fused pass, with the same arithmetic.
template <typename C>
void reduce_sources(typename C::Data* __restrict data, typename C::Wire* __restrict out, const std::byte* const* srcs,
                    int nsrc, int own_at, std::size_t n, Store store = Store::plain) {
  if (nsrc == 1 && store == Store::plain) {
    const auto* __restrict src = reinterpret_cast<const typename C::Wire*>(srcs[0]);
    for (std::size_t i = 0; i < n; ++i) {
      const typename C::Acc sum = as_sent<C>(data[i]) + C::from_wire(src[i]);
      out[i] = C::to_wire(sum);
      data[i] = C::to_data(sum);
    }
    return;
  }
  typename C::Acc acc[kBlockElems];
  typename C::Wire block[kBlockElems];
  for (std::size_t b = 0; b < n; b += kBlockElems) {
    const std::size_t m = n - b < kBlockElems ? n - b : kBlockElems;
    // acc = value(i) for the first contribution, acc += value(i) for the others.
    auto fold = [&](bool first, auto value) {
      if (first)
        for (std::size_t i = 0; i < m; ++i) acc[i] = value(i);
      else
        for (std::size_t i = 0; i < m; ++i) acc[i] = acc[i] + value(i);
    };
    for (int q = 0; q <= nsrc; ++q) {
      if (q == own_at) {
        fold(q == 0, [&](std::size_t i) { return as_sent<C>(data[b + i]); });
      } else {
        const auto* __restrict src = reinterpret_cast<const typename C::Wire*>(srcs[q < own_at ? q : q - 1]) + b;
        fold(q == 0, [&](std::size_t i) { return C::from_wire(src[i]); });
      }
    }
    for (std::size_t i = 0; i < m; ++i) {
      block[i] = C::to_wire(acc[i]);
      data[b + i] = C::to_data(acc[i]);
    }
    store_bytes(store, out + b, block, m * sizeof(typename C::Wire));
  }
}

}  // namespace ringtrain::comm
