// row_math's max_index against a scalar scan with > (the first largest element): every length
// around the lane count and a vocabulary-sized row, ties in several lanes, NaN and -inf.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "nn/row_math.hpp"
#include "ringtrain/core/random.hpp"

namespace ringtrain {
namespace {

std::int64_t scalar_max_index(const std::vector<float>& a) {
  std::int64_t best = 0;
  for (std::size_t i = 1; i < a.size(); ++i)
    if (a[i] > a[static_cast<std::size_t>(best)]) best = static_cast<std::int64_t>(i);
  return best;
}

std::int64_t max_index(const std::vector<float>& a) {
  return rowmath::max_index(a.data(), static_cast<std::int64_t>(a.size()));
}

TEST(RowMath, MaxIndexIsTheFirstLargestForEveryLength) {
  Rng rng(5);
  for (const std::int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 100, 50257}) {
    std::vector<float> a(static_cast<std::size_t>(n));
    for (float& x : a) x = static_cast<float>(rng.uniform()) * 4.0f - 2.0f;
    EXPECT_EQ(max_index(a), scalar_max_index(a)) << "n " << n;
    // The same largest value at three places, in different lanes and the tail: the first wins.
    const std::size_t first = a.size() / 3, second = a.size() / 2, third = a.size() - 1;
    a[third] = a[second] = a[first] = 3.0f;
    EXPECT_EQ(max_index(a), scalar_max_index(a)) << "ties, n " << n;
    EXPECT_EQ(max_index(a), static_cast<std::int64_t>(first)) << "ties, n " << n;
  }
}

TEST(RowMath, MaxIndexOfRowsWithNanAndInfinity) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> a(20, -inf);
  EXPECT_EQ(max_index(a), 0);  // all -inf: the first
  a[13] = 1.0f;
  a[5] = nan;  // a NaN is never larger
  EXPECT_EQ(max_index(a), 13);
  EXPECT_EQ(max_index(a), scalar_max_index(a));
  a[0] = nan;  // a leading NaN stays, as with the scan
  EXPECT_EQ(max_index(a), scalar_max_index(a));
}

}  // namespace
}  // namespace ringtrain
