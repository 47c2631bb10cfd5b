// RunReport's helpers: a true median (an even count's is the mean of the middle two), the
// slow-rank test built on it (one slow rank of two is found), counts with their plural, and
// a rank's resource line when the run took no sample.
#include <gtest/gtest.h>

#include "train/run_report.hpp"

namespace ringtrain {
namespace {

TEST(RunReport, MedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  EXPECT_EQ(median_value({}), 0.0);
  EXPECT_EQ(median_value({3.0}), 3.0);
  EXPECT_EQ(median_value({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(median_value({10.0, 20.0}), 15.0);
  EXPECT_EQ(median_value({4.0, 1.0, 3.0, 2.0}), 2.5);
}

TEST(RunReport, OneSlowRankOfTwoIsFound) {
  EXPECT_EQ(slow_ranks({10.0, 20.0}), std::vector<int>{1});
  EXPECT_EQ(slow_ranks({20.0, 10.0}), std::vector<int>{0});
  EXPECT_TRUE(slow_ranks({10.0, 11.0}).empty());
  EXPECT_TRUE(slow_ranks({10.0}).empty());
  EXPECT_EQ(slow_ranks({10.0, 10.0, 10.0, 30.0}), std::vector<int>{3});
  EXPECT_EQ(slow_ranks({10.0, 30.0, 10.0}), std::vector<int>{1});
}

TEST(RunReport, CountsTakeTheirPlural) {
  EXPECT_EQ(count_of(1, "rank"), "1 rank");
  EXPECT_EQ(count_of(2, "rank"), "2 ranks");
  EXPECT_EQ(count_of(0, "step"), "0 steps");
  EXPECT_EQ(count_of(1404, "step"), "1,404 steps");
}

TEST(RunReport, ARunWithoutSamplesSaysSoInsteadOfZeroCpu) {
  RankResources x;
  x.summary.rss_peak_mib = 120.0;
  x.median_busy_ms = 2.5;
  const std::string none = resource_line(1, x, 1000);
  EXPECT_EQ(none,
            "  rank 1: no samples (the run was shorter than monitor.interval_ms = 1000), memory peak 120 MiB, "
            "busy 2.50 ms/step");
  x.summary.samples = 1;
  x.summary.cpu_mean_percent = x.summary.cpu_max_percent = 97.0;
  const std::string one = resource_line(1, x, 1000);
  EXPECT_EQ(one.rfind("  rank 1: cpu mean 97% max 97%, memory peak 120 MiB, busy 2.50 ms/step | ", 0), 0u) << one;
  EXPECT_NE(one.find("(1 sample)"), std::string::npos) << one;
}

}  // namespace
}  // namespace ringtrain
