// shard_range: worked examples, then the layout's promises over a grid of counts and rank
// counts (contiguous, in rank order, exact cover, whole 64-element units but at the buffer's
// end, no shard longer than the rounded-up share, every shard at rank x shard_unit), and its
// argument checks.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ringtrain/comm/shard.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {

std::vector<std::int64_t> lengths(std::int64_t count, int size) {
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) out.push_back(shard_range(count, size, r).count);
  return out;
}

TEST(ShardRange, WorkedExamples) {
  using L = std::vector<std::int64_t>;
  EXPECT_EQ(lengths(0, 4), (L{0, 0, 0, 0}));
  EXPECT_EQ(lengths(1, 4), (L{1, 0, 0, 0}));
  EXPECT_EQ(lengths(63, 2), (L{63, 0}));
  EXPECT_EQ(lengths(129, 2), (L{128, 1}));          // share 65 -> unit 128
  EXPECT_EQ(lengths(256, 4), (L{64, 64, 64, 64}));  // share 64 is already a unit
  EXPECT_EQ(lengths(1000, 3), (L{384, 384, 232}));  // share 334 -> unit 384
  EXPECT_EQ(lengths(261, 4), (L{128, 128, 5, 0}));  // share 66 -> unit 128: the last one empty
  EXPECT_EQ(lengths(7, 1), (L{7}));
  EXPECT_EQ(shard_range(1000, 3, 2).offset, 768);
  EXPECT_EQ(shard_range(261, 4, 3).offset, 261);  // empty shards sit at the end, not past it
  EXPECT_EQ(shard_unit(261, 4), 128);             // padded to 4 x 128 = 512 for NCCL
  EXPECT_EQ(shard_unit(256, 4), 64);              // 256 = 4 x 64: no padding
  EXPECT_EQ(shard_unit(0, 3), 0);
}

TEST(ShardRange, ContiguousExactCoverInWholeUnits) {
  std::vector<std::int64_t> counts;
  for (std::int64_t c = 0; c <= 700; ++c) counts.push_back(c);
  for (std::int64_t c : {4095LL, 4096LL, 4097LL, 700000LL, (1LL << 31) + 3, (1LL << 40) + 12345}) counts.push_back(c);
  for (int size = 1; size <= 9; ++size) {
    for (std::int64_t count : counts) {
      const std::int64_t share = (count + size - 1) / size;
      std::int64_t next = 0;
      for (int r = 0; r < size; ++r) {
        const ArenaRange s = shard_range(count, size, r);
        ASSERT_EQ(s.offset, next) << "count " << count << " size " << size << " rank " << r;
        ASSERT_GE(s.count, 0);
        ASSERT_LE(s.count, share + kShardUnit - 1) << "count " << count << " size " << size;
        if (s.end() != count) ASSERT_EQ(s.count % kShardUnit, 0) << "count " << count << " size " << size;
        if (s.count > 0) ASSERT_EQ(s.offset % kShardUnit, 0);
        // The padded layout: every non-empty shard at r * unit; all but a clipped one a whole unit.
        const std::int64_t unit = shard_unit(count, size);
        if (s.count > 0) ASSERT_EQ(s.offset, r * unit) << "count " << count << " size " << size << " rank " << r;
        ASSERT_LE(s.count, unit);
        if (s.end() != count) ASSERT_EQ(s.count, unit) << "count " << count << " size " << size << " rank " << r;
        next = s.end();
      }
      ASSERT_EQ(next, count) << "count " << count << " size " << size;
    }
  }
}

TEST(ShardRange, RejectsOutOfRangeArguments) {
  EXPECT_THROW(shard_range(10, 0, 0), Error);
  EXPECT_THROW(shard_range(10, 2, 2), Error);
  EXPECT_THROW(shard_range(10, 2, -1), Error);
  EXPECT_THROW(shard_range(-1, 2, 0), Error);
  EXPECT_THROW(shard_unit(-1, 2), Error);
  EXPECT_THROW(shard_unit(10, 0), Error);
}

}  // namespace
}  // namespace ringtrain
