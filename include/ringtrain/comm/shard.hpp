// The one shard layout of ZeRO-style sharding, shared by every backend's reduce_scatter_sum
// and allgather and by whoever slices the flat arenas: contiguous shards in rank order, each a
// whole number of 64-element units, so that every shard but the last starts 256-byte aligned.
#pragma once
#include <cstdint>

#include "ringtrain/tensor/arena_range.hpp"

namespace ringtrain {

// Elements in a shard's alignment unit (256 bytes of f32).
inline constexpr std::int64_t kShardUnit = 64;

// Rank `rank`'s shard of a `count`-element buffer split over `size` ranks: contiguous, in rank
// order, covering [0, count) exactly once; every shard's length is a whole number of 64-element
// units (256 bytes of f32) except where the buffer ends. Shards may be empty for small counts.
// Throws Error unless count >= 0, size >= 1 and 0 <= rank < size.
ArenaRange shard_range(std::int64_t count, int size, int rank);

// The length of every shard that the buffer's end does not clip: rank r's shard starts at
// r * shard_unit, so a buffer padded to size * shard_unit elements holds every rank's shard at
// its place with one length for all (the layout of NCCL's in-place reduce-scatter and
// allgather). Throws Error unless count >= 0 and size >= 1.
std::int64_t shard_unit(std::int64_t count, int size);

}  // namespace ringtrain
