// ZeRO stage 2's gradient staging: buckets without tied parameters take the rotating buffers in
// turn (each waiting for the bucket before it in its buffer), a bucket with a tied parameter has
// a buffer of its own, the places tile the arena, the reduced shards land packed in arena
// order, and the bytes held are the buffers and the shard, not the arena.
#include <gtest/gtest.h>

#include "ringtrain/comm/shard.hpp"
#include "train/zero_gradients.hpp"

namespace ringtrain {
namespace {

// Ten buckets of 1000 elements in launch order (from the end of a 10,000-element arena).
std::vector<Bucket> ten_buckets() {
  std::vector<Bucket> b;
  for (std::int64_t end = 10000; end > 0; end -= 1000) b.push_back({end - 1000, end});
  return b;
}

TEST(ZeroGradients, RotatingBuffersAndATiedBucketOfItsOwn) {
  const std::vector<ArenaRange> tied{{100, 50}};  // in the last bucket launched: [0, 1000)
  ZeroGradients z(ten_buckets(), tied, 4, 1);
  const BucketStaging s = z.staging();
  ASSERT_EQ(s.data.size(), 10u);
  for (std::size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(s.data[i], s.data[i % 2]) << i;  // two rotating buffers, in turn
    EXPECT_EQ(s.reuses[i], i >= 2 ? static_cast<int>(i) - 2 : -1) << i;
  }
  EXPECT_EQ(s.reuses[9], -1);  // the tied bucket's buffer is its own
  EXPECT_NE(s.data[9], s.data[0]);
  EXPECT_NE(s.data[9], s.data[1]);
  // 2 rotating + 1 tied buffer of 1000 floats, and rank 1's shard of each bucket (whole 64-element
  // units: 256 of 1000): far below the 10,000-float arena
  EXPECT_EQ(shard_range(1000, 4, 1).count, 256);
  EXPECT_EQ(z.bytes(), static_cast<std::int64_t>((3 * 1000 + 10 * 256) * sizeof(float)));
  const std::vector<Model::GradientPlace> places = z.places();
  ASSERT_EQ(places.size(), 10u);
  for (std::size_t k = 0; k < places.size(); ++k) {
    EXPECT_EQ(places[k].offset, static_cast<std::int64_t>(k) * 1000);
    EXPECT_EQ(places[k].count, 1000);
    EXPECT_EQ(places[k].data, s.data[9 - k]);
  }
}

TEST(ZeroGradients, ReducedShardsArePackedInArenaOrder) {
  const std::vector<Bucket> buckets = ten_buckets();
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
