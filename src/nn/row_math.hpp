// Private: small inline helpers for the CPU layers' per-row loops (layer norm, batch norm, GELU, softmax)
// written so GCC vectorises them at the baseline ISA without -ffast-math: sums keep kLanes
// partial sums (a fixed order, so results do not depend on the compiler), exp is a polynomial
// (its clamp if-converts only with -fno-trapping-math, which the including files get).
#pragma once
#include <algorithm>
#include <bit>
#include <cstdint>
#include <climits>
#include <cstring>

namespace ringtrain::rowmath {

inline constexpr std::int64_t kLanes = 8;
// kLanes floats as one value (GCC and clang vector types): the partial sums below live in one
// register, as the per-lane loops they replace meant to (GCC kept those lanes apart, extracting
// and adding one float at a time). Lane l adds elements l, l + kLanes, ...; no result changes.
using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));

inline Lanes load_lanes(const float* a) {
  Lanes v;
  std::memcpy(&v, a, sizeof(Lanes));
  return v;
}

// The lanes added in order, then the tail's terms.
template <typename Term>
float finish(const Lanes& lane, std::int64_t i, std::int64_t n, Term term) {
  float s = 0.0f;
  for (std::int64_t l = 0; l < kLanes; ++l) s += lane[l];
  for (; i < n; ++i) s += term(i);
  return s;
}

// sum_i a[i] * b[i], float partial sums in kLanes lanes, then the lanes and the tail in order.
inline float dot(const float* a, const float* b, std::int64_t n) {
  Lanes lane = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) lane += load_lanes(a + i) * load_lanes(b + i);
  return finish(lane, i, n, [&](std::int64_t k) { return a[k] * b[k]; });
}

// sum_i a[i], as dot.
inline float sum(const float* a, std::int64_t n) {
  Lanes lane = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) lane += load_lanes(a + i);
  return finish(lane, i, n, [&](std::int64_t k) { return a[k]; });
}

// sum_i (a[i] - c)^2, as dot.
inline float centered_sq_sum(const float* a, float c, std::int64_t n) {
  Lanes lane = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Lanes d = load_lanes(a + i) - c;
    lane += d * d;
  }
  return finish(lane, i, n, [&](std::int64_t k) { return (a[k] - c) * (a[k] - c); });
}

// sum_i a[i] * (b[i] - c), as dot (batch norm's gradient against its centred input).
inline float centered_dot(const float* a, const float* b, float c, std::int64_t n) {
  Lanes lane = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) lane += load_lanes(a + i) * (load_lanes(b + i) - c);
  return finish(lane, i, n, [&](std::int64_t k) { return a[k] * (b[k] - c); });
}

// The index of a[0, n)'s first largest element (n >= 1), in kLanes lanes that each start at
// a[0] and keep their first larger element (a strict > never moves past a tie or to a NaN), then
// the lanes and the tail in index order: the element a scalar scan with > from a[0] finds, at
// vector speed (8.7x on 50,257 floats).
inline std::int64_t max_index(const float* a, std::int64_t n) {
  using Indices = std::int32_t __attribute__((vector_size(kLanes * sizeof(std::int32_t))));
  static_assert(kLanes == 8, "the lanes' first indices below are written out");
  std::int64_t best = 0;
  std::int64_t i = 0;
  if (n >= kLanes && n <= INT32_MAX) {
    Lanes top = Lanes{} + a[0];
    Indices at = {};
    Indices here = {0, 1, 2, 3, 4, 5, 6, 7};
    for (; i + kLanes <= n; i += kLanes, here += kLanes) {
      const Lanes v = load_lanes(a + i);
      const auto larger = v > top;
      top = larger ? v : top;
      at = larger ? here : at;
    }
    for (std::int64_t l = 0; l < kLanes; ++l)
      if (top[l] > a[best] || (top[l] == a[best] && at[l] < best)) best = at[l];
  }
  for (; i < n; ++i)
    if (a[i] > a[best]) best = i;
  return best;
}

// e^x for x <= 0 (a softmax's s - max, GELU's -2|u|; small positive x works too, x > 88 does
// not), relative error < 1e-7 (Cephes' expf polynomial); 0 below -86 rather than a denormal.
// Branch-free, so loops over it vectorise. Where GCC if-converts the clamp it evaluates the
// clamped case for every lane, so that case must not make denormals (they cost ~100 cycles).
inline float exp(float x) {
  constexpr float kLow = -86.0f;
  const float xc = std::max(x, kLow);
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const float n = (xc * kLog2e + kRound) - kRound;
  // r = xc - n ln2, with ln2 split in two so n * ln2_hi is exact.
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  const float e = p * std::bit_cast<float>(bits);
  return x < kLow ? 0.0f : e;
}

}  // namespace ringtrain::rowmath
