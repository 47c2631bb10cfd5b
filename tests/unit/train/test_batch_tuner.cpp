// Batch tuner logic: byte sizes and /proc fields, the memory bound of the search (checked
// before a size is allocated), and the knee rule (the smallest batch that no larger one
// beats by 5% or more).
#include <gtest/gtest.h>

#include "ringtrain/core/error.hpp"
#include "ringtrain/train/batch_tuner.hpp"

namespace ringtrain {
namespace {

TEST(ByteSize, ParsesBinaryDecimalAndPlainUnits) {
  EXPECT_EQ(parse_byte_size("2GiB"), std::int64_t{2} << 30);
  EXPECT_EQ(parse_byte_size("512MiB"), std::int64_t{512} << 20);
  EXPECT_EQ(parse_byte_size("1.5GB"), 1'500'000'000);
  EXPECT_EQ(parse_byte_size("64k"), 65536);
  EXPECT_EQ(parse_byte_size("1000000"), 1'000'000);
  EXPECT_EQ(parse_byte_size(" 3 gib "), std::int64_t{3} << 30);
  EXPECT_EQ(parse_byte_size("10B"), 10);
  EXPECT_EQ(parse_byte_size("2T"), std::int64_t{2} << 40);
}

TEST(ByteSize, RejectsWhatIsNotAPositiveSize) {
  for (const char* bad : {"", "abc", "12XB", "-1GiB", "0", "0.1", "1.2.3G", "GiB", "5 GiB extra", "1e3"}) {
    try {
      parse_byte_size(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_byte_size("99999999TiB"), ConfigError);
}

TEST(ProcFields, ReadsKibValuesByExactKey) {
  const std::string meminfo =
      "MemTotal:       24567890 kB\nMemFree:        20000000 kB\nMemAvailable:   22000000 kB\nBuffers: 1 kB\n";
  EXPECT_EQ(proc_kib_field_bytes(meminfo, "MemAvailable"), std::int64_t{22000000} * 1024);
  EXPECT_EQ(proc_kib_field_bytes(meminfo, "MemTotal"), std::int64_t{24567890} * 1024);
  EXPECT_EQ(proc_kib_field_bytes(meminfo, "Mem"), -1);
  EXPECT_EQ(proc_kib_field_bytes(meminfo, "SwapTotal"), -1);
  EXPECT_EQ(proc_kib_field_bytes("VmHWM:\t  123 kB", "VmHWM"), 123 * 1024);
  EXPECT_EQ(proc_kib_field_bytes("VmHWM: lots", "VmHWM"), -1);
}

TEST(MemoryLimit, DefaultIsAShareOfAvailableSplitOverLocalRanks) {
  const std::int64_t ten_gib = std::int64_t{10} << 30;
  EXPECT_EQ(default_memory_limit(ten_gib, 2), static_cast<std::int64_t>(kDefaultMemoryShare * ten_gib / 2));
  EXPECT_EQ(default_memory_limit(ten_gib, 0), static_cast<std::int64_t>(kDefaultMemoryShare * ten_gib));
}

TEST(MemoryModel, FitsFixedPlusPerSample) {
  const MemoryModel m = MemoryModel::fit(10e6, 74e6, 64);
  EXPECT_DOUBLE_EQ(m.per_sample_bytes, 1e6);
  EXPECT_DOUBLE_EQ(m.at(128), 138e6);
  EXPECT_DOUBLE_EQ(MemoryModel::fit(10e6, 9e6, 4).per_sample_bytes, 0.0);  // never negative
}

TEST(SearchStop, ChecksCapDatasetAndMemoryInThatOrder) {
  EXPECT_EQ(search_stop(64, 64, 100, 1e6, 1'000'000), SearchStop::none);  // an estimate equal to the limit fits
  EXPECT_EQ(search_stop(64, 64, 100, 1e6 + 1, 1'000'000), SearchStop::memory_limit);
  EXPECT_EQ(search_stop(128, 64, 100, 1e9, 1), SearchStop::max_batch);
  EXPECT_EQ(search_stop(128, 256, 100, 1e9, 1), SearchStop::dataset);
}

// The loop of `tune batch`: double while the estimate (from the last size measured) fits.
TEST(SearchStop, PowersOfTwoStopBeforeTheFirstSizeOverTheLimit) {
  const MemoryModel m{10.0 * (1 << 20), 1 << 20};  // 10 MiB + 1 MiB per sample
  const std::int64_t limit = 100 << 20;
  std::vector<std::int64_t> tried;
  std::int64_t b = 8;
  SearchStop stop = SearchStop::none;
  for (; (stop = search_stop(b, 4096, 1 << 20, m.at(b), limit)) == SearchStop::none; b *= 2) tried.push_back(b);
  EXPECT_EQ(tried, (std::vector<std::int64_t>{8, 16, 32, 64}));
  EXPECT_EQ(stop, SearchStop::memory_limit);
  EXPECT_EQ(b, 128);
  for (std::int64_t t : tried) EXPECT_LE(m.at(t), limit);
}

std::vector<BatchPoint> curve(const std::vector<double>& rates) {
  std::vector<BatchPoint> p;
  std::int64_t b = 8;
  for (double r : rates) {
    p.push_back({b, r});
    b *= 2;
  }
  return p;
}

TEST(Knee, SmallestBatchNoLargerOneBeatsByFivePercent) {
  // Gains per doubling: +60%, +20%, +2%, +2%: 32 is within 4.0% of the best (128).
  const KneeChoice k = choose_knee(curve({1000, 1600, 1920, 1958.4, 1997.568}));
  EXPECT_EQ(k.index, 2u);
  EXPECT_NE(k.reason.find("the best, 128, is +4.0%"), std::string::npos) << k.reason;
}

TEST(Knee, SmallGainsThatAddUpToFivePercentCount) {
  // +3% then +2%: 32 is 5.06% behind 128, so the knee is 64.
  EXPECT_EQ(choose_knee(curve({1000, 1600, 1920, 1977.6, 2017.152})).index, 3u);
}

TEST(Knee, AnEarlyFlatStepDoesNotHideALaterRise) {
  // Gains: +3% (noise), +12%, +1.7%, +0.7%: the knee is 32, not 8.
  EXPECT_EQ(choose_knee(curve({1000, 1030, 1153.6, 1173.2, 1181.4})).index, 2u);
}

TEST(Knee, ALaterDipDoesNotMoveTheKnee) {
  // 64 dips by 10% (noise) and 128 recovers: the knee stays 32.
  EXPECT_EQ(choose_knee(curve({1000, 1400, 1450, 1300, 1470, 1460})).index, 2u);
}

TEST(Knee, ExactlyFivePercentStillCountsAsAGain) { EXPECT_EQ(choose_knee(curve({1000, 1050, 1050})).index, 1u); }

TEST(Knee, SlowerWhenDoubledIsAKnee) {
  const KneeChoice k = choose_knee(curve({1000, 1500, 1400}));
  EXPECT_EQ(k.index, 1u);
  EXPECT_NE(k.reason.find("-6.7%"), std::string::npos) << k.reason;
}

TEST(Knee, LargestWhenEverySmallerOneIsBeaten) {
  const KneeChoice k = choose_knee(curve({1000, 1010, 1020, 1200}));
  EXPECT_EQ(k.index, 3u);
  EXPECT_NE(k.reason.find("largest"), std::string::npos) << k.reason;
  EXPECT_NE(k.reason.find("+17.6%"), std::string::npos) << k.reason;
  EXPECT_EQ(choose_knee(curve({1000})).index, 0u);
  EXPECT_THROW(choose_knee({}), Error);
}

}  // namespace
}  // namespace ringtrain
