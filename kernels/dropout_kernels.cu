// Inverted dropout with a counter-based mask: each element's draw depends only on (key, i),
// so the grid shape does not change the mask. The rules live in dropout_rule.hpp.
#include "kernels/dropout_kernels.hpp"
#include "kernels/launch.cuh"
#include "ringtrain/nn/dropout_rule.hpp"

namespace ringtrain::kernels {
namespace {

using namespace detail;

__global__ void store_key_kernel(std::uint64_t* slot, std::uint64_t key) { *slot = key; }

template <typename T>
__global__ void dropout_forward_kernel(const T* x, T* y, std::uint8_t* mask, std::int64_t n, float p, float keep_scale,
                                       const std::uint64_t* key_slot) {
  const std::uint64_t key = *key_slot;
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    const bool keep = dropout_keep(dropout_uniform(key, i), p);
    mask[i] = keep ? 1 : 0;
    y[i] = from_float<T>(to_float(x[i]) * (keep ? keep_scale : 0.0f));
  }
}

template <typename T>
__global__ void dropout_backward_kernel(const T* dy, const std::uint8_t* mask, T* dx, std::int64_t n,
                                        float keep_scale) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    dx[i] = from_float<T>(to_float(dy[i]) * (mask[i] != 0 ? keep_scale : 0.0f));
}

void require_probability(float p) {
  RT_REQUIRE(p >= 0.0f && p < 1.0f, Error, "dropout: p must be in [0, 1), got {}", p);
}

}  // namespace

void launch_store_key(std::uint64_t* slot, std::uint64_t key, void* stream) {
  store_key_kernel<<<1, 1, 0, as_stream(stream)>>>(slot, key);
  check_launch("store_key_kernel");
}

void launch_dropout_forward(const void* x, void* y, std::uint8_t* mask, std::int64_t n, float p,
                            const std::uint64_t* key, DType dtype, void* stream) {
  require_probability(p);
  dispatch_float(dtype, "dropout_forward", [&](auto tag) {
    using T = decltype(tag);
    launch_elementwise(dropout_forward_kernel<T>, "dropout_forward_kernel", n, stream, static_cast<const T*>(x),
                       static_cast<T*>(y), mask, n, p, dropout_scale(p), key);
  });
}

void launch_dropout_backward(const void* dy, const std::uint8_t* mask, void* dx, std::int64_t n, float p, DType dtype,
                             void* stream) {
  require_probability(p);
  dispatch_float(dtype, "dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    launch_elementwise(dropout_backward_kernel<T>, "dropout_backward_kernel", n, stream, static_cast<const T*>(dy),
                       mask, static_cast<T*>(dx), n, dropout_scale(p));
  });
}

}  // namespace ringtrain::kernels
