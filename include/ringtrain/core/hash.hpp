// FNV-1a, 64 bits: a fast hash for telling whether ranks hold the same bytes (parameters, a
// pruning mask, a config). Not for files: checkpoints carry their own checksums.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ringtrain {

inline constexpr std::uint64_t kFnv1aStart = 0xcbf29ce484222325ull;

// The hash of `bytes` bytes at `data`, continuing from `h` (pieces hash as their concatenation).
inline std::uint64_t fnv1a(const void* data, std::size_t bytes, std::uint64_t h = kFnv1aStart) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace ringtrain
