// format_bytes: whole bytes below 1 KiB, then one decimal of the largest binary unit that
// keeps the number at or above 1 (up to PiB); negative sizes (a difference) read alike.
#include <gtest/gtest.h>

#include <cstdint>

#include "ringtrain/core/bytes.hpp"

namespace ringtrain {
namespace {

TEST(FormatBytes, WholeBytesBelowOneKiB) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(100), "100 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
}

TEST(FormatBytes, OneDecimalOfTheLargestBinaryUnit) {
  EXPECT_EQ(format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(3.5 * (1 << 20)), "3.5 MiB");
  EXPECT_EQ(format_bytes(3.0 * (1 << 30)), "3.0 GiB");
  EXPECT_EQ(format_bytes(2.0 * (std::int64_t{1} << 40)), "2.0 TiB");
  EXPECT_EQ(format_bytes(4096.0 * (std::int64_t{1} << 50)), "4096.0 PiB");
}

TEST(FormatBytes, NegativeSizesReadLikePositiveOnes) { EXPECT_EQ(format_bytes(-1536), "-1.5 KiB"); }

}  // namespace
}  // namespace ringtrain
