// Inverted dropout with a counter-based mask: each element's draw depends only on (key, i),
// so the grid shape does not change the mask. The rules live in dropout_rule.hpp.
#include "kernels/dropout_kernels.hpp"
#include "kernels/launch.cuh"
#include "ringtrain/nn/dropout_rule.hpp"

namespace ringtrain::kernels {
namespace {

using namespace detail;

__global__ void store_key_kernel(std::uint64_t* slot, std::uint64_t key) { *slot = key; }

// x and y (which may alias) move in 16-byte vectors, the mask in vectors of as many bytes.
template <typename T>
bool dropout_vectorized(const void* a, const void* b, const std::uint8_t* mask) {
  return aligned_to(a, 16) && aligned_to(b, 16) && aligned_to(mask, kPack<T>);
}

template <typename T>
__global__ void dropout_forward_kernel(const T* x, T* y, std::uint8_t* mask, std::int64_t n, float p, float keep_scale,
                                       const std::uint64_t* key_slot, bool vectorized) {
  constexpr int K = kPack<T>;
  const std::uint64_t key = *key_slot;
  auto one = [&](std::int64_t i, T xi, std::uint8_t& m) {
    const bool keep = dropout_keep(dropout_uniform(key, i), p);
    m = keep ? 1 : 0;
    return from_float<T>(to_float(xi) * (keep ? keep_scale : 0.0f));
  };
  for_each_vector<K>(
      n, vectorized,
      [&](std::int64_t v) {
        const Vec<T, K> xv = reinterpret_cast<const Vec<T, K>*>(x)[v];
        Vec<T, K> yv;
        Vec<std::uint8_t, K> mv;
        for (int k = 0; k < K; ++k) yv.v[k] = one(v * K + k, xv.v[k], mv.v[k]);
        reinterpret_cast<Vec<T, K>*>(y)[v] = yv;
        reinterpret_cast<Vec<std::uint8_t, K>*>(mask)[v] = mv;
      },
      [&](std::int64_t i) { y[i] = one(i, x[i], mask[i]); });
}

template <typename T>
__global__ void dropout_backward_kernel(const T* dy, const std::uint8_t* mask, T* dx, std::int64_t n, float keep_scale,
                                        bool vectorized) {
  constexpr int K = kPack<T>;
  auto one = [&](T g, std::uint8_t m) { return from_float<T>(to_float(g) * (m != 0 ? keep_scale : 0.0f)); };
  for_each_vector<K>(
      n, vectorized,
      [&](std::int64_t v) {
        const Vec<T, K> gv = reinterpret_cast<const Vec<T, K>*>(dy)[v];
        const Vec<std::uint8_t, K> mv = reinterpret_cast<const Vec<std::uint8_t, K>*>(mask)[v];
        Vec<T, K> out;
        for (int k = 0; k < K; ++k) out.v[k] = one(gv.v[k], mv.v[k]);
        reinterpret_cast<Vec<T, K>*>(dx)[v] = out;
      },
      [&](std::int64_t i) { dx[i] = one(dy[i], mask[i]); });
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
    const bool vectorized = dropout_vectorized<T>(x, y, mask);
    launch_vectorized<kPack<T>>(dropout_forward_kernel<T>, "dropout_forward_kernel", n, vectorized, stream,
                                static_cast<const T*>(x), static_cast<T*>(y), mask, n, p, dropout_scale(p), key,
                                vectorized);
  });
}

void launch_dropout_backward(const void* dy, const std::uint8_t* mask, void* dx, std::int64_t n, float p, DType dtype,
                             void* stream) {
  require_probability(p);
  dispatch_float(dtype, "dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    const bool vectorized = dropout_vectorized<T>(dy, dx, mask);
    launch_vectorized<kPack<T>>(dropout_backward_kernel<T>, "dropout_backward_kernel", n, vectorized, stream,
                                static_cast<const T*>(dy), mask, static_cast<T*>(dx), n, dropout_scale(p), vectorized);
  });
}

}  // namespace ringtrain::kernels
