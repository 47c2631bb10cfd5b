// How a range of elements is cut among ranks (`parts` near-equal contiguous segments, the same
// on every rank for the same count: the shared-memory allreduce's rounds) and into slices (the
// ring's messages, the shared-memory rounds of a shard).
#pragma once
#include <algorithm>
#include <cstddef>

namespace ringtrain::comm {

// Segment i of `count` elements split `parts` ways: the first count % parts segments get one
// extra element. Segments are empty when count < parts.
struct Segments {
  Segments(std::size_t count, int parts)
      : base(count / static_cast<std::size_t>(parts)), extra(count % static_cast<std::size_t>(parts)) {}
  std::size_t begin(int i) const {
    const auto u = static_cast<std::size_t>(i);
    return u * base + std::min(u, extra);
  }
  std::size_t length(int i) const { return base + (static_cast<std::size_t>(i) < extra ? 1 : 0); }
  std::size_t max_length() const { return base + (extra > 0 ? 1 : 0); }

  std::size_t base;
  std::size_t extra;
};

// Elements of slice k of a run of `length` elements cut in slices of `slice` elements (0 past
// its end: ranks move the same number of slices, some of them empty).
inline std::size_t slice_length(std::size_t length, std::size_t k, std::size_t slice) {
  const std::size_t offset = k * slice;
  return offset >= length ? 0 : std::min(slice, length - offset);
}

}  // namespace ringtrain::comm
