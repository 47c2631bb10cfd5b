// What a short training run prints and leaves behind: no augmentation line unless one is
// configured, counts with their plural, the trace's path, "no samples" for a run shorter than
// monitor.interval_ms, final_test_accuracy null without a test set, and a summary.json with
// "finished": false from a run stopped early (train.exit_at_step), true once resumed to the end;
// an MFU above 100% explained once.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "integration/run_command.hpp"

namespace ringtrain::test {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("ringtrain-run-output-" + name);
  fs::remove_all(d);
  return d;
}

// The MLP example on Fashion-MNIST, one BLAS thread per rank, plus `extra` overrides.
CommandResult train(int ranks, const fs::path& run_dir, std::vector<std::string> extra) {
  const fs::path data = RINGTRAIN_DATA_DIR;
  std::vector<std::string> args = {"train", std::string(RINGTRAIN_SOURCE_DIR) + "/examples/fashion_mnist/mlp.toml",
                                   "--set", "data.train=" + (data / "train.h5").string(),
                                   "--set", "data.test=" + (data / "test.h5").string(),
                                   "--set", "runtime.threads=1",
                                   "--set", "train.log_every=10",
                                   "--set", "run.dir=" + run_dir.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_ringtrain(ranks, args);
}

nlohmann::json summary_of(const fs::path& run_dir) {
  std::ifstream f(run_dir / "summary.json");
  return f.good() ? nlohmann::json::parse(f) : nlohmann::json();
}

bool has_line_starting(const std::string& output, const std::string& prefix) {
  for (const auto& line : lines_of(output))
    if (line.rfind(prefix, 0) == 0) return true;
  return false;
}

TEST(RunOutput, OneRankWithoutTestSetAugmentationOrSamples) {
  ASSERT_TRUE(fs::exists(fs::path(RINGTRAIN_DATA_DIR) / "train.h5")) << "fixture prepare_fashion_mnist did not run";
  const fs::path run = fresh_dir("plain");
  const auto r = train(1, run,
                       {"--set", "data.test=", "--set", "train.max_steps=20", "--set", "checkpoint.enabled=false",
                        "--set", "monitor.interval_ms=600000", "--set", "monitor.trace=true"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(has_line_starting(r.output, "augment:")) << r.output;
  EXPECT_NE(r.output.find("= 1 rank x 64"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("1 ranks"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("trace:  " + (run / "trace.json").string()), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(run / "trace.json"));
  EXPECT_NE(r.output.find("rank 0: no samples (the run was shorter than monitor.interval_ms = 600000)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("cpu mean 0%"), std::string::npos) << r.output;
  EXPECT_TRUE(has_line_starting(r.output, "done: 1 epoch, 20 steps,")) << r.output;
  const auto s = summary_of(run);
  ASSERT_FALSE(s.is_null()) << r.output;
  EXPECT_TRUE(s["final_test_accuracy"].is_null()) << s.dump(2);
  EXPECT_EQ(s["finished"], true);
  EXPECT_TRUE(s["resources"]["ranks"][0]["cpu_mean_percent"].is_null()) << s.dump(2);
}

// A peak below what training reaches (here configured so; a CPU busy while the trainer measured
// it gives the same) is named, once, with the key that sets it.
TEST(RunOutput, AnMfuAboveOneHundredPercentIsExplainedOnce) {
  const fs::path run = fresh_dir("mfu");
  const auto r = train(1, run,
                       {"--set", "data.test=", "--set", "train.max_steps=30", "--set", "checkpoint.enabled=false",
                        "--set", "monitor.peak_gflops=0.001"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::size_t warnings = 0;
  for (const auto& line : lines_of(r.output))
    if (line.find("is above 100%: the peak it is measured against, 0.0 GFLOP/s per rank (monitor.peak_gflops)") !=
            std::string::npos &&
        line.find("set monitor.peak_gflops") != std::string::npos)
      ++warnings;
  EXPECT_EQ(warnings, 1u) << r.output;
}

TEST(RunOutput, AStoppedRunWritesAnUnfinishedSummary) {
  const fs::path run = fresh_dir("stopped");
  const std::vector<std::string> common = {"--set", "data.augment.flip=true", "--set", "train.max_steps=30"};
  auto first = common;
  first.insert(first.end(), {"--set", "train.exit_at_step=10"});
  const auto stopped = train(2, run, first);
  ASSERT_EQ(stopped.exit_code, 75) << stopped.output;
  EXPECT_TRUE(has_line_starting(stopped.output, "augment: left-right flip of training batches on the CPU"))
      << stopped.output;
  EXPECT_TRUE(has_line_starting(stopped.output, "stopped early: 1 epoch, 10 steps,")) << stopped.output;
  EXPECT_FALSE(has_line_starting(stopped.output, "done:")) << "job scripts take done: for a finished run";
  EXPECT_NE(stopped.output.find("stopped: train.exit_at_step = 10 reached after step 10 of 30"), std::string::npos)
      << stopped.output;
  auto s = summary_of(run);
  ASSERT_FALSE(s.is_null()) << stopped.output;
  EXPECT_EQ(s["finished"], false);
  EXPECT_EQ(s["steps"], 10);
  EXPECT_EQ(s["final_step"], 10);
  EXPECT_TRUE(s["final_test_accuracy"].is_null()) << "no epoch ended, so nothing was evaluated";
  EXPECT_TRUE(s["first_epoch"].is_null()) << "no evaluation, so no epoch of one (was 0 beside 1-based ones)";

  auto second = common;
  second.insert(second.end(), {"--set", "train.resume=auto"});
  const auto resumed = train(2, run, second);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  s = summary_of(run);
  EXPECT_EQ(s["finished"], true);
  EXPECT_EQ(s["start_step"], 10);
  EXPECT_EQ(s["final_step"], 30);
  EXPECT_GT(s["final_test_accuracy"].get<double>(), 0.1) << "the last, partial epoch is evaluated";
  EXPECT_EQ(s["first_epoch"], 1) << s.dump(2);
}

}  // namespace
}  // namespace ringtrain::test
