// `ringtrain doctor` and resource monitoring on a CPU machine (no GPU, no NVML): doctor exits
// 0 on 1 and 2 ranks and says there is no GPU, --json parses, --require-gpu fails with a
// clear line; a short training writes resource lines and prints the per-rank summary.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "integration/run_command.hpp"

namespace ringtrain::test {
namespace {

namespace fs = std::filesystem;

bool gpu_machine() { return fs::exists("/dev/nvidia0"); }

class Doctor : public ::testing::TestWithParam<int> {};

TEST_P(Doctor, TextSaysThereIsNoGpuAndExitsZero) {
  if (gpu_machine()) GTEST_SKIP() << "GPU machine: tools/device/check-monitor-doctor.sh covers it";
  const auto r = run_ringtrain(GetParam(), {"doctor", "--selftest-mib", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* expected :
       {"ringtrain doctor:", "mpi_thread_level", "hdf5", "blas", "sgemm", "no GPU visible on any rank",
        "no GPU telemetry (libnvidia-ml.so.1 not found)", "result: ok"})
    EXPECT_NE(r.output.find(expected), std::string::npos) << expected << "\n" << r.output;
  if (GetParam() > 1) EXPECT_NE(r.output.find("busbw"), std::string::npos) << r.output;
}

TEST_P(Doctor, JsonIsOneObject) {
  if (gpu_machine()) GTEST_SKIP() << "GPU machine: tools/device/check-monitor-doctor.sh covers it";
  const auto r = run_ringtrain(GetParam(), {"doctor", "--json", "--selftest-mib", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["ranks"], GetParam());
  EXPECT_EQ(j["result"], "ok");
  EXPECT_TRUE(j["gpus"].empty());
  EXPECT_FALSE(j["gpus_missing_reason"].get<std::string>().empty());
  EXPECT_TRUE(j["versions"].contains("hdf5"));
  EXPECT_FALSE(j["versions"]["cudnn_frontend"].get<std::string>().empty());
  EXPECT_GE(j["checks"].size(), 6u);
  if (GetParam() > 1) {
    EXPECT_TRUE(j["selftest"]["correct"].get<bool>());
    EXPECT_GT(j["selftest"]["busbw_gbps"].get<double>(), 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, Doctor, ::testing::Values(1, 2));

TEST(Doctor, RequireGpuFailsWithAClearLine) {
  if (gpu_machine()) GTEST_SKIP() << "GPU machine";
  const auto r = run_ringtrain(2, {"doctor", "--require-gpu", "--selftest-mib", "0"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("fail  gpus              no GPU visible on any rank"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("result: fail"), std::string::npos) << r.output;
}

TEST(Monitor, TrainingWritesResourceLinesAndPerRankSummary) {
  const fs::path data = RINGTRAIN_DATA_DIR;
  ASSERT_TRUE(fs::exists(data / "train.h5")) << "fixture prepare_fashion_mnist did not run";
  const fs::path run_dir = fs::temp_directory_path() / "ringtrain-monitor";
  fs::remove_all(run_dir);
  const auto r = run_ringtrain(
      2, {"train", std::string(RINGTRAIN_SOURCE_DIR) + "/examples/fashion_mnist/mlp.toml", "--set",
          "data.train=" + (data / "train.h5").string(), "--set", "data.test=" + (data / "test.h5").string(), "--set",
          "train.max_steps=60", "--set", "train.log_every=20", "--set", "monitor.interval_ms=50", "--set",
          "checkpoint.enabled=false", "--set", "run.dir=" + run_dir.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("monitor: every 50 ms: cpu + memory"), std::string::npos) << r.output;
  if (!gpu_machine())
    EXPECT_NE(r.output.find("no GPU telemetry (libnvidia-ml.so.1 not found)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resources per rank"), std::string::npos) << r.output;
  for (const char* rank : {"  rank 0: cpu mean", "  rank 1: cpu mean"})
    EXPECT_NE(r.output.find(rank), std::string::npos) << r.output;

  std::ifstream metrics(run_dir / "metrics.jsonl");
  int samples = 0, summaries = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "resource") {
      ++samples;
      EXPECT_EQ(j["rank"], 0);
      EXPECT_GE(j["cpu_percent"].get<double>(), 0.0);
      EXPECT_GT(j["rss_mib"].get<double>(), 0.0);
    }
    if (j["type"] == "resource_summary") {
      ++summaries;
      EXPECT_EQ(j["ranks"].size(), 2u);
    }
  }
  EXPECT_GE(samples, 1);
  EXPECT_EQ(summaries, 1);
  std::ifstream summary_file(run_dir / "summary.json");
  const auto summary = nlohmann::json::parse(summary_file);
  ASSERT_TRUE(summary.contains("resources")) << summary.dump(2);
  EXPECT_EQ(summary["resources"]["ranks"].size(), 2u);
  EXPECT_GT(summary["resources"]["ranks"][1]["rss_peak_mib"].get<double>(), 0.0);
  EXPECT_GT(summary["resources"]["ranks"][1]["samples"].get<int>(), 0);
}

}  // namespace
}  // namespace ringtrain::test
