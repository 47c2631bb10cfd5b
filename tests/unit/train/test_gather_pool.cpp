// ZeRO stage 3's pool of gathered-group buffers: a buffer given back is taken again by the next
// group that fits in it (the smallest that does), groups of nearly one size share a buffer, and
// the bytes count only the buffers made, in the pool's dtype.
#include <gtest/gtest.h>

#include "train/zero_parameters.hpp"

namespace ringtrain {
namespace {

TEST(GatherPool, ReusesTheSmallestFreeBufferThatFits) {
  GatherPool pool(DType::f32, Device::cpu);
  Tensor big = pool.take(10000), small = pool.take(1000);
  const std::int64_t made = pool.bytes();
  EXPECT_GE(made, 11000 * 4);
  const void* big_data = big.raw();
  const void* small_data = small.raw();
  pool.give(std::move(big));
  pool.give(std::move(small));
  EXPECT_EQ(pool.take(900).raw(), small_data);  // both fit: the smaller one
  EXPECT_EQ(pool.take(5000).raw(), big_data);
  EXPECT_EQ(pool.bytes(), made);
  pool.take(20000);  // none free fits: a new one
  EXPECT_GT(pool.bytes(), made);
}

TEST(GatherPool, NearlyEqualSizesShareABufferAndRoundingIsSmall) {
  GatherPool pool(DType::f32, Device::cpu);
  Tensor first = pool.take(2362368);
  EXPECT_LE(first.numel(), 2362368 + 2362368 / 64);
  const void* data = first.raw();
  pool.give(std::move(first));
  EXPECT_EQ(pool.take(2361600).raw(), data);  // a GPT block's two MLP groups differ by 768 floats
  EXPECT_EQ(pool.take(37).numel(), 37);       // small sizes are not rounded up
}

TEST(GatherPool, HandsOutBuffersOfItsDtype) {
  GatherPool pool(DType::bf16, Device::cpu);
  const Tensor buffer = pool.take(1000);
  EXPECT_EQ(buffer.dtype(), DType::bf16);
  EXPECT_EQ(buffer.numel(), 1000);
  EXPECT_EQ(pool.bytes(), 2000);
}

}  // namespace
}  // namespace ringtrain
