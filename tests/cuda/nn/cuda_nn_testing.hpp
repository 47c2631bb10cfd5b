// What the CUDA nn wrapper tests need beyond cuda/cuda_test_support.hpp (GPU detection, device
// buffers, the error measure): pairwise distinct inputs for max pooling, and the tolerance of
// an op run under a cuda::MathMode.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "nn/cuda/math_mode.hpp"

namespace ringtrain::test {

// n pairwise distinct values, exact in bf16 and f16 (so max pooling has no ties), shuffled.
inline std::vector<float> distinct_values(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  const std::uint16_t first = float_to_bf16(0.0625f);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = bf16_to_float(static_cast<std::uint16_t>(first + i)) * (i % 2 == 0 ? 1.0f : -1.0f);
  Rng rng(stream_key(seed));
  for (std::size_t i = n; i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
  return v;
}

// The tolerance (test_context.hpp: f32 < 1e-5, tf32 < 2e-3, bf16/f16 < 1e-2) for an op whose
// inputs and outputs are `dtype` under `math`.
inline double tolerance(DType dtype, cuda::MathMode math) {
  return dtype == DType::f32 && math == cuda::MathMode::tf32 ? kTolTf32 : tolerance(dtype);
}

}  // namespace ringtrain::test
