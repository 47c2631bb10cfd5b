// Checkpoint checksums of both schemes (format 1's block hash, read only, and format 2's XXH3):
// deterministic, sensitive to every single bit (also at block boundaries and in a short tail),
// and equal to the combination of block hashes computed piecewise on block-aligned slices,
// which is what the parallel write and read rely on; format 2's values are those xxhsum gives
// (docs/CHECKPOINT.md), format 1's are pinned. Plus file naming.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "ckpt/checksum.hpp"
#include "ringtrain/ckpt/checkpoint.hpp"
#include "ringtrain/ckpt/checkpoint_dir.hpp"

namespace ringtrain {
namespace {

using ckpt::ChecksumScheme;
constexpr std::int64_t kBlock = ckpt::kChecksumBlockBytes;
// Format 1's checksums of 0 bytes and of pattern(kBlock + 1), pinned when it was written.
constexpr std::uint64_t kV1EmptyChecksum = 0xa1e09b0ffe382d5bull;
constexpr std::uint64_t kV1PatternChecksum = 0x09d2f1b5eb5a7c75ull;
// Format 2's, from Debian 12's xxhsum 0.8.1 with the procedure of docs/CHECKPOINT.md applied to
// pattern(kBlock + 1) written to a file: `xxhsum -H3` of its two blocks, then of their digests.
constexpr std::uint64_t kXxh3Block0 = 0x635d6fff94f571f7ull;
constexpr std::uint64_t kXxh3Block1 = 0xe47e4c5a224123f1ull;
constexpr std::uint64_t kXxh3PatternChecksum = 0x4e8ddca5a1eb1d12ull;
constexpr std::uint64_t kXxh3Empty = 0x2d06800538d394c2ull;  // `xxhsum -H3 < /dev/null`: no blocks

// Bytes that are neither zero nor periodic, from a fixed xorshift sequence.
std::vector<unsigned char> pattern(std::int64_t bytes, std::uint64_t seed = 0x1234567u) {
  std::vector<unsigned char> out(static_cast<std::size_t>(bytes));
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& b : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<unsigned char>(x >> 32);
  }
  return out;
}

// The properties every scheme must have; the scheme under test is the parameter.
class EveryScheme : public ::testing::TestWithParam<ChecksumScheme> {
 protected:
  std::uint64_t sum_of(const std::vector<unsigned char>& v) const { return sum_of(v.data(), v.size()); }
  std::uint64_t sum_of(const unsigned char* data, std::size_t bytes) const {
    return ckpt::buffer_checksum(GetParam(), data, static_cast<std::int64_t>(bytes));
  }
};

INSTANTIATE_TEST_SUITE_P(CheckpointChecksum, EveryScheme,
                         ::testing::Values(ChecksumScheme::kBlockHash64, ChecksumScheme::kXxh3),
                         [](const auto& info) { return info.param == ChecksumScheme::kXxh3 ? "xxh3" : "v1"; });

TEST(CheckpointChecksum, BlockSizeIsOneMiB) {
  EXPECT_EQ(kBlock, 1 << 20);
  EXPECT_EQ(ckpt::block_count(0), 0);
  EXPECT_EQ(ckpt::block_count(1), 1);
  EXPECT_EQ(ckpt::block_count(kBlock), 1);
  EXPECT_EQ(ckpt::block_count(kBlock + 1), 2);
  EXPECT_EQ(ckpt::block_count(3 * kBlock), 3);
}

TEST_P(EveryScheme, IsDeterministicAndIndependentOfTheBuffersAddress) {
  const auto a = pattern(3 * kBlock + 77);
  const std::uint64_t first = sum_of(a);
  EXPECT_EQ(sum_of(a), first);
  // The same bytes at another (unaligned) address.
  std::vector<unsigned char> shifted(3);
  shifted.insert(shifted.end(), a.begin(), a.end());
  EXPECT_EQ(sum_of(shifted.data() + 3, a.size()), first);
  // Other content gives another checksum.
  EXPECT_NE(sum_of(pattern(3 * kBlock + 77, 99)), first);
}

TEST_P(EveryScheme, EverySingleBitFlipChangesIt) {
  const std::int64_t n = 2 * kBlock + 123;
  auto buf = pattern(n);
  const std::uint64_t clean = sum_of(buf);
  const std::vector<std::int64_t> positions = {0,
                                               1,
                                               7,
                                               31,
                                               32,
                                               4095,
                                               kBlock - 1,
                                               kBlock,
                                               kBlock + 1,
                                               kBlock + 31,
                                               2 * kBlock - 1,
                                               2 * kBlock,
                                               2 * kBlock + 64,
                                               n - 2,
                                               n - 1};
  std::set<std::uint64_t> seen = {clean};
  for (const std::int64_t at : positions) {
    for (const int bit : {0, 3, 7}) {
      buf[static_cast<std::size_t>(at)] ^= static_cast<unsigned char>(1u << bit);
      const std::uint64_t flipped = sum_of(buf);
      EXPECT_NE(flipped, clean) << "byte " << at << " bit " << bit;
      seen.insert(flipped);
      buf[static_cast<std::size_t>(at)] ^= static_cast<unsigned char>(1u << bit);
    }
  }
  EXPECT_EQ(sum_of(buf), clean);  // flipped back: the same again
  // Every flip gave its own value (a weak hash would map several of them together).
  EXPECT_EQ(seen.size(), 1 + positions.size() * 3);
}

TEST_P(EveryScheme, SwappingTwoBlocksChangesIt) {
  // Block order matters: the combination is not a plain XOR or sum of block hashes.
  auto buf = pattern(2 * kBlock);
  const std::uint64_t clean = sum_of(buf);
  std::vector<unsigned char> swapped(buf.begin() + kBlock, buf.end());
  swapped.insert(swapped.end(), buf.begin(), buf.begin() + kBlock);
  EXPECT_NE(sum_of(swapped), clean);
}

TEST_P(EveryScheme, EdgeSizesAreAllDistinctAndBitSensitive) {
  const std::vector<std::int64_t> sizes = {0, 1, 31, 32, 33, kBlock, kBlock + 1};
  std::set<std::uint64_t> of_pattern, of_zeros;
  const auto big = pattern(kBlock + 1);
  for (const std::int64_t n : sizes) {
    std::vector<unsigned char> v(big.begin(), big.begin() + n);
    const std::uint64_t s = sum_of(v);
    EXPECT_EQ(sum_of(v), s) << n << " bytes";
    of_pattern.insert(s);
    if (n > 0) {
      v.back() ^= 0x80;  // the last byte (part of the zero-padded tail for most sizes)
      EXPECT_NE(sum_of(v), s) << n << " bytes, last byte flipped";
      v.back() ^= 0x80;
      v.front() ^= 0x01;
      EXPECT_NE(sum_of(v), s) << n << " bytes, first byte flipped";
    }
    // Zero bytes of different lengths must differ too (the tail is padded with zeros, so
    // only the length tells 31 zero bytes from 32).
    of_zeros.insert(sum_of(std::vector<unsigned char>(static_cast<std::size_t>(n), 0)));
  }
  EXPECT_EQ(of_pattern.size(), sizes.size());
  EXPECT_EQ(of_zeros.size(), sizes.size());
  // An empty range never touches its pointer.
  EXPECT_EQ(sum_of(nullptr, 0), sum_of({}));
}

TEST_P(EveryScheme, EqualsTheCombinationOfItsBlockHashes) {
  for (const std::int64_t n :
       {std::int64_t{0}, std::int64_t{1}, std::int64_t{33}, kBlock, kBlock + 1, 3 * kBlock + 77}) {
    const auto buf = pattern(n);
    std::vector<std::uint64_t> blocks(static_cast<std::size_t>(ckpt::block_count(n)));
    ckpt::hash_blocks(GetParam(), buf.data(), n, blocks.data());
    for (std::int64_t k = 0; k < ckpt::block_count(n); ++k) {
      const std::int64_t len = std::min(kBlock, n - k * kBlock);
      EXPECT_EQ(blocks[static_cast<std::size_t>(k)], ckpt::block_hash(GetParam(), buf.data() + k * kBlock, len))
          << n << " bytes, block " << k;
    }
    EXPECT_EQ(ckpt::combine_block_hashes(GetParam(), blocks.data(), static_cast<std::int64_t>(blocks.size())),
              sum_of(buf))
        << n << " bytes";
  }
}

TEST_P(EveryScheme, SlicesSplitAtBlockBoundariesCombineToTheWholeChecksum) {
  // What the parallel write does: each rank hashes its own block-aligned slice, the block
  // hashes are gathered in order and combined. Every split point (also the empty slices at
  // either end) must give the checksum of the whole buffer.
  const std::int64_t n = 3 * kBlock + 77;
  const auto buf = pattern(n, 7);
  const std::uint64_t whole = sum_of(buf);
  const std::int64_t total = ckpt::block_count(n);
  for (std::int64_t split = 0; split <= total; ++split) {
    const std::int64_t head_bytes = std::min(n, split * kBlock);
    std::vector<std::uint64_t> hashes(static_cast<std::size_t>(total));
    ckpt::hash_blocks(GetParam(), buf.data(), head_bytes, hashes.data());
    ckpt::hash_blocks(GetParam(), buf.data() + head_bytes, n - head_bytes, hashes.data() + split);
    EXPECT_EQ(ckpt::combine_block_hashes(GetParam(), hashes.data(), total), whole) << "split at block " << split;
  }
  // Four slices of uneven block counts, as four ranks would hold them.
  std::vector<std::uint64_t> hashes(static_cast<std::size_t>(total));
  const std::int64_t cuts[] = {0, 1, 1, 3, total};
  for (int r = 0; r < 4; ++r) {
    const std::int64_t begin = std::min(n, cuts[r] * kBlock), end = std::min(n, cuts[r + 1] * kBlock);
    ckpt::hash_blocks(GetParam(), buf.data() + begin, end - begin, hashes.data() + cuts[r]);
  }
  EXPECT_EQ(ckpt::combine_block_hashes(GetParam(), hashes.data(), total), whole);
}

TEST(CheckpointChecksum, FormatVersionsChooseTheirScheme) {
  EXPECT_EQ(ckpt::checksum_scheme(1), ChecksumScheme::kBlockHash64);
  EXPECT_EQ(ckpt::checksum_scheme(2), ChecksumScheme::kXxh3);
  EXPECT_EQ(ckpt::checksum_scheme(kCheckpointFormatVersion), ChecksumScheme::kXxh3);
  EXPECT_STREQ(ckpt::checksum_algorithm(ChecksumScheme::kBlockHash64), "ringtrain-blockhash64 (1 MiB blocks)");
  EXPECT_STRNE(ckpt::checksum_algorithm(ChecksumScheme::kXxh3), ckpt::checksum_algorithm(ChecksumScheme::kBlockHash64));
  // What this build writes.
  const auto buf = pattern(3 * kBlock + 5);
  EXPECT_EQ(checkpoint_checksum(buf.data(), static_cast<std::int64_t>(buf.size())),
            ckpt::buffer_checksum(ChecksumScheme::kXxh3, buf.data(), static_cast<std::int64_t>(buf.size())));
}

TEST(CheckpointChecksum, FormatOneValuesAreStableAcrossBuilds) {
  // Format 1 checksums are stored in files: a build that computed them differently would call
  // every format 1 checkpoint damaged.
  const auto buf = pattern(kBlock + 1);
  EXPECT_EQ(ckpt::buffer_checksum(ChecksumScheme::kBlockHash64, nullptr, 0), kV1EmptyChecksum);
  EXPECT_EQ(ckpt::buffer_checksum(ChecksumScheme::kBlockHash64, buf.data(), kBlock + 1), kV1PatternChecksum);
}

TEST(CheckpointChecksum, FormatTwoIsWhatXxhsumPrints) {
  // XXH3-64 itself: the reference values of `printf '' | xxhsum -H3` and `printf abc | xxhsum -H3`.
  EXPECT_EQ(ckpt::xxh3_64(nullptr, 0), kXxh3Empty);
  EXPECT_EQ(ckpt::xxh3_64("abc", 3), 0x78af5f94892f3950ull);
  // Each block's hash is the block's XXH3-64; the dataset's is XXH3-64 of the digests as
  // xxhsum prints them (big-endian bytes), concatenated.
  const auto buf = pattern(kBlock + 1);
  EXPECT_EQ(ckpt::block_hash(ChecksumScheme::kXxh3, buf.data(), kBlock), kXxh3Block0);
  EXPECT_EQ(ckpt::block_hash(ChecksumScheme::kXxh3, buf.data() + kBlock, 1), kXxh3Block1);
  unsigned char digests[16];
  for (int i = 0; i < 8; ++i) {
    digests[i] = static_cast<unsigned char>(kXxh3Block0 >> (56 - 8 * i));
    digests[8 + i] = static_cast<unsigned char>(kXxh3Block1 >> (56 - 8 * i));
  }
  EXPECT_EQ(ckpt::xxh3_64(digests, sizeof digests), kXxh3PatternChecksum);
  EXPECT_EQ(checkpoint_checksum(buf.data(), kBlock + 1), kXxh3PatternChecksum);
  EXPECT_EQ(checkpoint_checksum(nullptr, 0), kXxh3Empty);  // no blocks: XXH3-64 of nothing
}

TEST(CheckpointDirNames, FileNameHasNineDigitStep) {
  EXPECT_EQ(CheckpointDir::file_name(1200), "ckpt-000001200.h5");
  EXPECT_EQ(CheckpointDir::file_name(0), "ckpt-000000000.h5");
  EXPECT_EQ(CheckpointDir::file_name(999999999), "ckpt-999999999.h5");
  EXPECT_EQ(CheckpointDir::file_name(1234567890), "ckpt-1234567890.h5");  // wider, never cut
}

}  // namespace
}  // namespace ringtrain
