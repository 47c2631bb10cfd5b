// ZeRO stage 2's gradient staging: the buckets take a ring the size of the largest one in turn,
// each waiting for the latest earlier bucket it overlaps, the places tile the arena, the reduced
// shards land packed in arena order, and the bytes held are the ring and the shard, not the arena.
#include <gtest/gtest.h>

#include "ringtrain/comm/shard.hpp"
#include "train/zero_gradients.hpp"

namespace ringtrain {
namespace {

// Buckets of 600, 300, 300, 1000 and 200 elements in launch order (from the end of the arena).
std::vector<Bucket> mixed_buckets() {
  std::vector<Bucket> b;
  std::int64_t end = 2400;
  for (const std::int64_t n : {600, 300, 300, 1000, 200}) {
    b.push_back({end - n, end});
    end -= n;
  }
  return b;
}

TEST(ZeroGradients, BucketsTakeTheRingInTurnAndWaitForWhatTheyOverlap) {
  // pads [1190, 1250) (across buckets [200, 1200) and [1200, 1500)) and [2350, 2400) (the end of [1800, 2400))
  ZeroGradients z(mixed_buckets(), {{1190, 60}, {2350, 50}}, 4, 1);
  const BucketStaging s = z.staging();
  ASSERT_EQ(s.data.size(), 5u);
  const float* ring = s.data[0];
  // ring of 1000 (the largest bucket): [0,600) [600,900) | wraps: [0,300) [0,1000) | [0,200)
  EXPECT_EQ(s.data[1] - ring, 600);
  EXPECT_EQ(s.data[2] - ring, 0);
  EXPECT_EQ(s.data[3] - ring, 0);
  EXPECT_EQ(s.data[4] - ring, 0);
  EXPECT_EQ(s.reuses, (std::vector<int>{-1, -1, 0, 2, 3}));  // the latest earlier bucket each overlaps
  // each bucket's pads, from its start
  ASSERT_EQ(s.unwritten.size(), 5u);
  ASSERT_EQ(s.unwritten[0].size(), 1u);
  EXPECT_EQ(s.unwritten[0][0].offset, 2350 - 1800);
  EXPECT_EQ(s.unwritten[0][0].count, 50);
  EXPECT_TRUE(s.unwritten[1].empty());
  ASSERT_EQ(s.unwritten[2].size(), 1u);
  EXPECT_EQ(s.unwritten[2][0].offset, 0);
  EXPECT_EQ(s.unwritten[2][0].count, 50);
  ASSERT_EQ(s.unwritten[3].size(), 1u);
  EXPECT_EQ(s.unwritten[3][0].offset, 1190 - 200);
  EXPECT_EQ(s.unwritten[3][0].count, 10) << "the pad is cut where the bucket ends";
  ASSERT_EQ(s.unwritten[4].size(), 0u);
  // the ring, and rank 1's shard of each bucket (whole 64-element units): far below the arena
  std::int64_t shard = 0;
  for (const Bucket& b : mixed_buckets()) shard += shard_range(b.end - b.begin, 4, 1).count;
  EXPECT_EQ(z.staging_bytes(), static_cast<std::int64_t>(1000 * sizeof(float)));
  EXPECT_EQ(z.shard_bytes(), static_cast<std::int64_t>(shard * sizeof(float)));
  EXPECT_LT(z.staging_bytes() + z.shard_bytes(), static_cast<std::int64_t>(2400 * sizeof(float)));
  const std::vector<Model::GradientPlace> places = z.places();  // in arena order
  ASSERT_EQ(places.size(), 5u);
  std::int64_t at = 0;
  for (std::size_t k = 0; k < places.size(); ++k) {
    EXPECT_EQ(places[k].offset, at);
    EXPECT_EQ(places[k].data, s.data[4 - k]);
    at += places[k].count;
  }
  EXPECT_EQ(at, 2400);
}

TEST(ZeroGradients, ReducedShardsArePackedInArenaOrder) {
  const std::vector<Bucket> buckets = mixed_buckets();
  const int world = 4, rank = 2;
  ZeroGradients z(buckets, {}, world, rank);
  BucketStaging s = z.staging();
  for (std::size_t i = 0; i < buckets.size(); ++i) {  // each bucket's staged values: its arena offsets
    for (std::int64_t e = buckets[i].begin; e < buckets[i].end; ++e)
      s.data[i][e - buckets[i].begin] = static_cast<float>(e);
    s.on_reduced(i);
  }
  std::vector<float> expected;
  for (std::size_t i = buckets.size(); i-- > 0;) {
    const ArenaRange own = shard_range(buckets[i].end - buckets[i].begin, world, rank);
    for (std::int64_t e = 0; e < own.count; ++e)
      expected.push_back(static_cast<float>(buckets[i].begin + own.offset + e));
  }
  ASSERT_EQ(z.shard().numel(), static_cast<std::int64_t>(expected.size()));
  for (std::size_t k = 0; k < expected.size(); ++k) EXPECT_EQ(z.shard().f32()[k], expected[k]) << k;
}

}  // namespace
}  // namespace ringtrain
