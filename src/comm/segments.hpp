// How a range of elements is cut among ranks: `parts` near-equal contiguous segments, the
// same on every rank for the same count. Shared by the ring and the shared-memory allreduce.
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

}  // namespace ringtrain::comm
