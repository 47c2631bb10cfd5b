// The running (maximum, sum of exponentials) of running_softmax_rule.hpp, which the CUDA loss
// kernel uses, on the CPU: one pass in runs of 1 or 8 values, strided partial pairs merged in a
// tree (as a block merges them) and a direct log-sum-exp in double agree; merges are commutative
// bit for bit (a butterfly's lanes end equal); -inf adds nothing, a NaN poisons the sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/running_softmax_rule.hpp"

namespace ringtrain {
namespace {

struct Pair {
  float max = -INFINITY, sum = 0.0f;
};

// The pair over z[first], z[first + stride], ..., added in runs of `run` values (the kernel adds
// one 16-byte load's worth: 8 bf16 or 4 f32).
Pair over(const std::vector<float>& z, std::size_t first, std::size_t stride, int run) {
  Pair p;
  std::vector<float> values;
  for (std::size_t i = first; i < z.size(); i += stride) values.push_back(z[i]);
  for (std::size_t i = 0; i < values.size(); i += static_cast<std::size_t>(run))
    add_exps(p.max, p.sum, values.data() + i, static_cast<int>(std::min<std::size_t>(run, values.size() - i)));
  return p;
}

std::vector<float> values(std::size_t n, std::uint64_t seed) {
  Rng rng(stream_key(seed));
  std::vector<float> z(n);
  for (float& v : z) v = 12.0f * rng.uniform() - 6.0f;
  z[5] = -INFINITY;
  z[n / 2] = z[n / 3];  // a tie
  return z;
}

TEST(RunningSoftmax, OnePassAndTreeMergeEqualTheDirectSum) {
  for (const std::size_t n : {std::size_t{50}, std::size_t{50257}}) {
    const std::vector<float> z = values(n, n);
    double top = -std::numeric_limits<double>::infinity();
    for (float v : z) top = std::max(top, static_cast<double>(v));
    double direct = 0.0;
    for (float v : z) direct += std::exp(static_cast<double>(v) - top);

    for (const int run : {1, 8}) {  // one float sum over all: as exact as any only for a lane's share
      const Pair one = over(z, 0, 1, run);
      EXPECT_EQ(one.max, static_cast<float>(top));
      EXPECT_NEAR(one.sum / direct, 1.0, n <= 256 ? 1e-6 : 1e-4) << n << " run " << run;
    }

    constexpr std::size_t kLanes = 256;  // a block's threads, each over a strided part
    std::vector<Pair> lanes(kLanes);
    for (std::size_t l = 0; l < kLanes; ++l) lanes[l] = over(z, l, kLanes, 8);
    for (std::size_t half = kLanes / 2; half > 0; half /= 2)
      for (std::size_t l = 0; l < half; ++l)
        merge_exp(lanes[l].max, lanes[l].sum, lanes[l + half].max, lanes[l + half].sum);
    EXPECT_EQ(lanes[0].max, static_cast<float>(top));
    EXPECT_NEAR(lanes[0].sum / direct, 1.0, 1e-6) << n;
  }
}

TEST(RunningSoftmax, MergesAreCommutativeBitForBit) {
  const std::vector<float> z = values(999, 3);
  const Pair a = over(z, 0, 3, 8), b = over(z, 1, 3, 8);
  Pair ab = a, ba = b;
  merge_exp(ab.max, ab.sum, b.max, b.sum);
  merge_exp(ba.max, ba.sum, a.max, a.sum);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(ab.max), std::bit_cast<std::uint32_t>(ba.max));
  EXPECT_EQ(std::bit_cast<std::uint32_t>(ab.sum), std::bit_cast<std::uint32_t>(ba.sum));
}

TEST(RunningSoftmax, InfinityAndNan) {
  Pair empty;
  const float minus_inf[] = {-INFINITY, -INFINITY};
  add_exps(empty.max, empty.sum, minus_inf, 2);
  EXPECT_EQ(empty.sum, 0.0f) << "-inf adds nothing";
  Pair other;
  merge_exp(empty.max, empty.sum, other.max, other.sum);
  EXPECT_EQ(empty.sum, 0.0f) << "two empty pairs";
  for (const int run : {1, 3}) {  // the NaN alone in a run, and in a run with a larger value after it
    Pair p;
    const float v[] = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
    for (int i = 0; i < 3; i += run) add_exps(p.max, p.sum, v + i, run);
    EXPECT_TRUE(std::isnan(p.sum)) << run;
    EXPECT_EQ(p.max, 2.0f) << run;
  }
  Pair top;  // +inf: the maximum, adding 1; everything else 0
  const float with_inf[] = {3.0f, INFINITY, 1.0f};
  add_exps(top.max, top.sum, with_inf, 3);
  EXPECT_EQ(top.max, INFINITY);
  EXPECT_EQ(top.sum, 1.0f);
}

}  // namespace
}  // namespace ringtrain
