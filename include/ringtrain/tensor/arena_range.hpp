// ArenaRange: a run of elements of a model's flat parameter (or gradient) arena, as pruning
// masks and the optimizer's weight-decay groups select them.
#pragma once
#include <cstdint>

namespace ringtrain {

struct ArenaRange {
  std::int64_t offset = 0;
  std::int64_t count = 0;
  std::int64_t end() const { return offset + count; }
};

}  // namespace ringtrain
