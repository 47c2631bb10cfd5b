// ParamLayout: the packing between a padded parameter arena (or a ZeRO shard of it) and the
// logical parameters checkpoints hold, in place and not, with the pads zeroed on the way back.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/param_layout.hpp"

namespace ringtrain {
namespace {

// Three tensors of 10, 300 and 5 elements at aligned offsets 0, 128 and 512: an arena of 517.
ParamLayout three_tensors() { return ParamLayout({{0, 10}, {128, 300}, {512, 5}}, 517); }

// The arena with element i = i + 1 inside a tensor and 0 in a pad.
std::vector<float> arena_values(const ParamLayout& layout) {
  std::vector<float> a(static_cast<std::size_t>(layout.arena_elements()), 0.0f);
  for (const ArenaRange r : std::vector<ArenaRange>{{0, 10}, {128, 300}, {512, 5}})
    for (std::int64_t i = r.offset; i < r.end(); ++i) a[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
  return a;
}

TEST(ParamLayout, AlignedRoundsUpToWholeBlocks) {
  EXPECT_EQ(ParamLayout::aligned(0), 0);
  EXPECT_EQ(ParamLayout::aligned(1), ParamLayout::kAlignElements);
  EXPECT_EQ(ParamLayout::aligned(ParamLayout::kAlignElements), ParamLayout::kAlignElements);
  EXPECT_EQ(ParamLayout::aligned(ParamLayout::kAlignElements + 1), 2 * ParamLayout::kAlignElements);
  EXPECT_EQ(ParamLayout::kAlignElements * 2, 256) << "256 bytes of a bf16 compute copy";
}

TEST(ParamLayout, TheWholeArenaPacksIntoTheTensorsInOrder) {
  const ParamLayout layout = three_tensors();
  EXPECT_EQ(layout.logical_elements(), 315);
  const ParamLayout::Packing p = layout.packing_of_arena();
  ASSERT_EQ(p.copies.size(), 3u);
  EXPECT_EQ(p.copies[1].from, 128);
  EXPECT_EQ(p.copies[1].to, 10);
  EXPECT_EQ(p.copies[2].to, 310);
  ASSERT_EQ(p.logical.size(), 1u) << "one logical run: the tensors follow each other";
  EXPECT_EQ(p.logical[0].count, 315);
  EXPECT_FALSE(p.identity());

  const std::vector<float> arena = arena_values(layout);
  std::vector<float> logical(315);
  pack(p, arena.data(), logical.data());
  EXPECT_EQ(logical[9], 10.0f);
  EXPECT_EQ(logical[10], 129.0f) << "the second tensor follows the first without its pad";
  EXPECT_EQ(logical[314], 517.0f);

  std::vector<float> back(arena.size(), -1.0f);  // pads must come back as zeros
  unpack(p, logical.data(), back.data());
  EXPECT_EQ(back, arena);
}

TEST(ParamLayout, PacksAndUnpacksInPlace) {
  const ParamLayout layout = three_tensors();
  const ParamLayout::Packing p = layout.packing_of_arena();
  const std::vector<float> arena = arena_values(layout);
  std::vector<float> logical(315);
  pack(p, arena.data(), logical.data());

  std::vector<float> buffer = arena;
  pack(p, buffer.data(), buffer.data());
  EXPECT_TRUE(std::equal(logical.begin(), logical.end(), buffer.begin()));
  unpack(p, buffer.data(), buffer.data());
  EXPECT_EQ(buffer, arena);
}

TEST(ParamLayout, AShardMapsToTheLogicalRangesItHolds) {
  const ParamLayout layout = three_tensors();
  // A rank owning [5, 200) and [500, 517): half of tensor 0, a pad, part of tensor 1; a pad and tensor 2.
  const std::vector<ArenaRange> owned{{5, 195}, {500, 17}};
  const ParamLayout::Packing p = layout.packing(owned);
  EXPECT_EQ(p.source_elements, 212);
  ASSERT_EQ(p.logical.size(), 2u);
  EXPECT_EQ(p.logical[0].offset, 5);
  EXPECT_EQ(p.logical[0].count, 5 + 72) << "tensor 0's last 5 and tensor 1's first 72: one logical run";
  EXPECT_EQ(p.logical[1].offset, 310);
  EXPECT_EQ(p.logical[1].count, 5);
  EXPECT_EQ(p.elements(), 82);

  const std::vector<float> arena = arena_values(layout);
  std::vector<float> shard;  // the owned elements, packed, as a ZeRO shard holds them
  for (const ArenaRange& r : owned) shard.insert(shard.end(), arena.begin() + r.offset, arena.begin() + r.end());
  std::vector<float> logical(82);
  pack(p, shard.data(), logical.data());
  EXPECT_EQ(logical[0], 6.0f);
  EXPECT_EQ(logical[5], 129.0f);
  EXPECT_EQ(logical[76], 200.0f);
  EXPECT_EQ(logical[77], 513.0f);
  std::vector<float> back(shard.size(), -1.0f);
  unpack(p, logical.data(), back.data());
  EXPECT_EQ(back, shard);
}

TEST(ParamLayout, AShardOfPadsOnlyHoldsNothing) {
  const ParamLayout::Packing p = three_tensors().packing({{20, 100}});
  EXPECT_EQ(p.elements(), 0);
  EXPECT_TRUE(p.logical.empty());
  std::vector<float> shard(100, 3.0f);
  unpack(p, nullptr, shard.data());
  EXPECT_EQ(shard, std::vector<float>(100, 0.0f));
}

TEST(ParamLayout, WithoutPadsTheArenaIsItsLogicalParameters) {
  const ParamLayout layout({{0, 128}, {128, 7}}, 135);
  EXPECT_TRUE(layout.packing_of_arena().identity());
  EXPECT_EQ(layout.packing_of_arena().copies.size(), 1u);
}

TEST(ParamLayout, RejectsOverlappingTensors) {
  EXPECT_THROW(ParamLayout({{0, 10}, {5, 10}}, 20), Error);
  EXPECT_THROW(ParamLayout({{0, 10}}, 5), Error);
}

}  // namespace
}  // namespace ringtrain
