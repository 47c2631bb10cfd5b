// Deterministic, platform-independent random numbers (std distributions are not portable
// across standard libraries). Streams are derived from (seed, purpose, indices) by hashing,
// so results never depend on thread timing, call order across ranks, or world size.
#pragma once
#include <cmath>
#include <cstdint>

namespace ringtrain {

constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A stream key from a seed and up to three indices (e.g. epoch, step, layer).
constexpr std::uint64_t stream_key(std::uint64_t seed, std::uint64_t a = 0, std::uint64_t b = 0, std::uint64_t c = 0) {
  return splitmix64(splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b) ^ c);
}

// xoshiro256** seeded through splitmix64.
class Rng {
 public:
  explicit Rng(std::uint64_t key) {
    for (auto& s : s_) {
      key += 0x9e3779b97f4a7c15ull;
      s = splitmix64(key);
    }
  }
  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 24 random bits (exact in float).
  float uniform() { return static_cast<float>(next() >> 40) * 0x1.0p-24f; }
  // Standard normal (Box-Muller from two 53-bit uniforms; one draw per call, portable).
  double normal() {
    const double u1 = (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(next() >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Uniform integer in [0, n), unbiased (Lemire's method with rejection).
  std::uint64_t below(std::uint64_t n) {
    std::uint64_t x = next();
    __uint128_t m = static_cast<__uint128_t>(x) * n;
    std::uint64_t l = static_cast<std::uint64_t>(m);
    if (l < n) {
      const std::uint64_t t = (0 - n) % n;
      while (l < t) {
        x = next();
        m = static_cast<__uint128_t>(x) * n;
        l = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

}  // namespace ringtrain
