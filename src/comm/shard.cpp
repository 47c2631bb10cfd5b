// shard_range (see ringtrain/comm/shard.hpp): every rank's shard is `unit` elements, the
// per-rank share rounded up to kShardUnit, clipped to the end of the buffer.
#include "ringtrain/comm/shard.hpp"

#include <algorithm>

#include "ringtrain/core/error.hpp"

namespace ringtrain {

std::int64_t shard_unit(std::int64_t count, int size) {
  RT_REQUIRE(count >= 0 && size >= 1, Error, "shard_unit: count {} over {} ranks: out of range", count, size);
  const std::int64_t share = (count + size - 1) / size;
  return (share + kShardUnit - 1) / kShardUnit * kShardUnit;
}

ArenaRange shard_range(std::int64_t count, int size, int rank) {
  RT_REQUIRE(count >= 0 && size >= 1 && rank >= 0 && rank < size, Error,
             "shard_range: rank {} of {} ranks, count {}: out of range", rank, size, count);
  const std::int64_t unit = shard_unit(count, size);
  const std::int64_t begin = std::min(rank * unit, count);
  const std::int64_t end = std::min((rank + 1) * unit, count);
  return {begin, end - begin};
}

}  // namespace ringtrain
