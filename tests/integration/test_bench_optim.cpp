// `ringtrain bench optim` through the real executable on the CPU: the JSON line holds the
// bytes each pass moves (each update's bound pass moves exactly the update's), positive
// bandwidths and their ratios; a bad --params is refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "integration/run_command.hpp"

namespace ringtrain::test {
namespace {

TEST(BenchOptim, ReportsBytesBandwidthAndRatios) {
  const CommandResult r =
      run_ringtrain(1, {"bench", "optim", "--params", "100000", "--iterations", "3", "--repeats", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j;
  for (const std::string& line : lines_of(r.output))
    if (!line.empty() && line.front() == '{') j = nlohmann::json::parse(line);
  ASSERT_FALSE(j.is_null()) << "no JSON line in:\n" << r.output;
  EXPECT_EQ(j["bench"], "optim");
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["params"], 100000);
  EXPECT_EQ(j["copy_bytes_per_update"].get<double>(), 8.0 * 100000);
  EXPECT_EQ(j["adamw_bytes_per_update"].get<double>(), 28.0 * 100000);
  EXPECT_EQ(j["sgd_bytes_per_update"].get<double>(), 20.0 * 100000);
  EXPECT_EQ(j["adamw_bound_bytes_per_update"], j["adamw_bytes_per_update"]);
  EXPECT_EQ(j["sgd_bound_bytes_per_update"], j["sgd_bytes_per_update"]);
  for (const char* pass : {"copy", "adamw", "adamw_bound", "sgd", "sgd_bound"}) {
    const std::string name(pass);
    EXPECT_EQ(j[name + "_ms_runs"].size(), 3u) << name;
    EXPECT_GT(j[name + "_ms"].get<double>(), 0.0) << name;
    // GB/s is the bytes over the median time.
    EXPECT_NEAR(j[name + "_GBps"].get<double>(),
                j[name + "_bytes_per_update"].get<double>() / (j[name + "_ms"].get<double>() * 1e-3) / 1e9,
                1e-6 * j[name + "_GBps"].get<double>())
        << name;
  }
  for (const char* pass : {"adamw", "sgd"}) {
    const std::string name(pass);
    // The share of the bound's speed: the bound's time over the update's.
    EXPECT_NEAR(j[name + "_vs_bound"].get<double>(),
                j[name + "_bound_ms"].get<double>() / j[name + "_ms"].get<double>(), 1e-9)
        << name;
    EXPECT_NEAR(j[name + "_vs_copy_bandwidth"].get<double>(),
                j[name + "_GBps"].get<double>() / j["copy_GBps"].get<double>(), 1e-9)
        << name;
  }
  EXPECT_FALSE(j.contains("copy_vs_copy_bandwidth"));
  EXPECT_FALSE(j.contains("copy_vs_bound"));
}

TEST(BenchOptim, RefusesABadParamsValue) {
  for (const char* bad : {"0", "-5", "many"}) {
    const CommandResult r = run_ringtrain(1, {"bench", "optim", "--params", bad});
    EXPECT_NE(r.exit_code, 0) << bad << ":\n" << r.output;
    EXPECT_LT(r.exit_code, 124) << "timed out or killed by a signal:\n" << r.output;
    EXPECT_NE(r.output.find("--params"), std::string::npos) << bad << ":\n" << r.output;
    EXPECT_EQ(r.output.find('{'), std::string::npos) << "no measurement expected:\n" << r.output;
  }
}

}  // namespace
}  // namespace ringtrain::test
