// ParamLayout (see header). Packing drops elements, so every copy moves data towards lower
// offsets: packing in place runs the copies in ascending order, unpacking in descending order,
// with memmove for the overlap within one copy.
#include "ringtrain/tensor/param_layout.hpp"

#include <algorithm>
#include <cstring>

#include "ringtrain/core/error.hpp"

namespace ringtrain {

ParamLayout::ParamLayout(std::vector<ArenaRange> tensors, std::int64_t arena_elements)
    : tensors_(std::move(tensors)), arena_elements_(arena_elements) {
  std::int64_t end = 0;
  for (const ArenaRange& t : tensors_) {
    RT_REQUIRE(t.offset >= end && t.count >= 0 && t.end() <= arena_elements_, Error,
               "ParamLayout: tensor range [{}, {}) is not sorted, disjoint and inside the arena of {} elements",
               t.offset, t.end(), arena_elements_);
    logical_offset_.push_back(logical_elements_);
    logical_elements_ += t.count;
    end = t.end();
  }
}

std::vector<ArenaRange> ParamLayout::pads() const {
  std::vector<ArenaRange> out;
  std::int64_t at = 0;
  for (const ArenaRange& t : tensors_) {
    if (t.offset > at) out.push_back({at, t.offset - at});
    at = t.end();
  }
  if (arena_elements_ > at) out.push_back({at, arena_elements_ - at});
  return out;
}

ParamLayout::Packing ParamLayout::packing(const std::vector<ArenaRange>& owned) const {
  Packing p;
  p.source_elements = total_count(owned);
  std::size_t t = 0;  // the tensor holding the current run (runs come in arena order)
  std::int64_t to = 0;
  for_each_owned(tensors_, owned, [&](std::int64_t offset, std::int64_t from, std::int64_t count) {
    while (tensors_[t].end() <= offset) ++t;
    const std::int64_t logical = logical_offset_[t] + (offset - tensors_[t].offset);
    if (!p.copies.empty() && p.copies.back().from + p.copies.back().count == from)
      p.copies.back().count += count;  // `to` is contiguous by construction
    else
      p.copies.push_back({from, to, count});
    if (!p.logical.empty() && p.logical.back().end() == logical)
      p.logical.back().count += count;
    else
      p.logical.push_back({logical, count});
    to += count;
  });
  return p;
}

void pack(const ParamLayout::Packing& p, const float* source, float* logical) {
  for (const ParamLayout::Copy& c : p.copies)
    if (logical + c.to != source + c.from)
      std::memmove(logical + c.to, source + c.from, static_cast<std::size_t>(c.count) * sizeof(float));
}

void unpack(const ParamLayout::Packing& p, const float* logical, float* source) {
  std::int64_t gap_end = p.source_elements;  // zeros from the end of this copy to here
  for (auto c = p.copies.rbegin(); c != p.copies.rend(); ++c) {
    std::fill(source + c->from + c->count, source + gap_end, 0.0f);
    if (logical + c->to != source + c->from)
      std::memmove(source + c->from, logical + c->to, static_cast<std::size_t>(c->count) * sizeof(float));
    gap_end = c->from;
  }
  std::fill(source, source + gap_end, 0.0f);
}

}  // namespace ringtrain
