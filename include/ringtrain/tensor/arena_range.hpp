// ArenaRange: a run of elements of a model's flat parameter (or gradient) arena, as pruning
// masks, the optimizer's weight-decay groups and ZeRO shards select them; and the walk over
// the parts of such runs that a rank owns when its share of the arena is stored packed.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace ringtrain {

struct ArenaRange {
  std::int64_t offset = 0;
  std::int64_t count = 0;
  std::int64_t end() const { return offset + count; }
};

// The elements of ranges, summed.
inline std::int64_t total_count(const std::vector<ArenaRange>& ranges) {
  std::int64_t n = 0;
  for (const ArenaRange& r : ranges) n += r.count;
  return n;
}

// Calls fn(arena_offset, packed_offset, count) for every run of elements both in `selected`
// and in `owned` (each sorted and disjoint), in arena order. packed_offset is where the run
// starts in a buffer holding the owned elements packed in order (a ZeRO shard's optimizer state).
template <typename F>
void for_each_owned(const std::vector<ArenaRange>& selected, const std::vector<ArenaRange>& owned, F&& fn) {
  std::size_t s = 0;
  std::int64_t packed = 0;  // owned elements before owned[o]
  for (const ArenaRange& o : owned) {
    while (s < selected.size() && selected[s].end() <= o.offset) ++s;
    for (std::size_t k = s; k < selected.size() && selected[k].offset < o.end(); ++k) {
      const std::int64_t begin = std::max(o.offset, selected[k].offset);
      const std::int64_t end = std::min(o.end(), selected[k].end());
      if (end > begin) fn(begin, packed + (begin - o.offset), end - begin);
    }
    packed += o.count;
  }
}

}  // namespace ringtrain
