// `ringtrain bench train` through the real executable: on 1 and 2 ranks, synthetic and real
// batches, the JSON line holds a consistent step-time breakdown, the text calls its parts
// separate medians, and a bad config gives one error line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "integration/run_command.hpp"

namespace ringtrain::test {
namespace {

std::string mlp() { return std::string(RINGTRAIN_SOURCE_DIR) + "/examples/fashion_mnist/mlp.toml"; }
std::string train_data() { return std::string(RINGTRAIN_DATA_DIR) + "/train.h5"; }

nlohmann::json bench(int ranks, bool synthetic) {
  std::vector<std::string> args = {"bench", "train",     mlp(), "--json", "--steps",
                                   "4",     "--warmup",  "1",   "--set",  "data.train=" + train_data(),
                                   "--set", "data.test="};
  if (synthetic) args.emplace_back("--synthetic");
  const CommandResult r = run_ringtrain(ranks, args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& line : lines_of(r.output))
    if (!line.empty() && line.front() == '{') return nlohmann::json::parse(line);
  ADD_FAILURE() << "no JSON line in:\n" << r.output;
  return {};
}

class BenchTrain : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(BenchTrain, ReportsAConsistentBreakdown) {
  const auto [ranks, synthetic] = GetParam();
  const nlohmann::json j = bench(ranks, synthetic);
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["ranks"], ranks);
  EXPECT_EQ(j["synthetic"], synthetic);
  EXPECT_EQ(j["global_batch"], 64 * ranks);
  EXPECT_EQ(j["grad_bytes"], 535818 * 4);
  EXPECT_GT(j["samples_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["forward_ms"].get<double>(), 0.0);
  EXPECT_GT(j["backward_ms"].get<double>(), 0.0);
  EXPECT_EQ(j["phases_timed"], true);  // the CPU times its phases
  // The parts are medians of rank 0's steps and the step is the slowest rank's median, so
  // they need not add up exactly; they must not exceed it by much.
  const double parts = j["data_wait_ms"].get<double>() + j["forward_ms"].get<double>() +
                       j["backward_ms"].get<double>() + j["exposed_comm_ms"].get<double>() +
                       j["optimizer_ms"].get<double>();
  EXPECT_LT(parts, 1.5 * j["step_ms"].get<double>());
  if (ranks > 1) {
    EXPECT_GT(j["allreduce_ms"].get<double>(), 0.0);
    EXPECT_GT(j["allreduce_busbw_GBps"].get<double>(), 0.0);
  } else {
    EXPECT_EQ(j["allreduce_busbw_GBps"].get<double>(), 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Runs, BenchTrain, ::testing::Combine(::testing::Values(1, 2), ::testing::Values(true, false)),
                         [](const auto& info) {
                           return std::string(std::get<1>(info.param) ? "synthetic" : "real") + "_np" +
                                  std::to_string(std::get<0>(info.param));
                         });

// The text report gives the step and its parts as what they are, separate medians, and does
// not write them as a sum that need not hold.
TEST(BenchTrainText, PartsAreSeparateMediansNotASum) {
  const CommandResult r = run_ringtrain(1, {"bench", "train", mlp(), "--synthetic", "--steps", "3", "--warmup", "1",
                                            "--set", "data.train=" + train_data(), "--set", "data.test="});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("each its own median"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" = data"), std::string::npos) << r.output;
}

// --layers: one entry per layer in model order, its kind, and times that fit in the step: the
// layers' forward times add up to at most the step's forward (the loss and the rest are outside
// them), and only layers with work take time (the MLP: flatten, linear, relu, ...).
TEST(BenchTrainLayers, OneEntryPerLayerWithinTheStepsParts) {
  const CommandResult r =
      run_ringtrain(1, {"bench", "train", mlp(), "--synthetic", "--json", "--layers", "--steps", "4", "--warmup", "1",
                        "--set", "data.train=" + train_data(), "--set", "data.test="});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j;
  for (const std::string& line : lines_of(r.output))
    if (!line.empty() && line.front() == '{') j = nlohmann::json::parse(line);
  ASSERT_TRUE(j.contains("layers")) << r.output;
  const std::vector<std::string> kinds = {"flatten", "linear", "relu", "linear", "relu", "linear"};
  ASSERT_EQ(j["layers"].size(), kinds.size()) << j.dump();
  double forward = 0, backward = 0;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    const nlohmann::json& l = j["layers"][i];
    EXPECT_EQ(l["index"], i);
    EXPECT_EQ(l["kind"], kinds[i]);
    EXPECT_GE(l["forward_ms"].get<double>(), 0.0);
    forward += l["forward_ms"].get<double>();
    backward += l["backward_ms"].get<double>();
    if (kinds[i] == "linear") EXPECT_GT(l["forward_gflops"].get<double>(), 0.0) << l.dump();
  }
  EXPECT_GT(j["layers"][1]["forward_ms"].get<double>(), 0.0);           // the 784x512 GEMM takes time
  EXPECT_LE(forward, 1.2 * j["forward_ms"].get<double>()) << j.dump();  // medians of sums vs sums of medians
  EXPECT_LE(backward, 1.2 * j["backward_ms"].get<double>()) << j.dump();
}

TEST(BenchTrainErrors, AMissingConfigIsOneLine) {
  const CommandResult r = run_ringtrain(2, {"bench", "train", "/nonexistent/run.toml", "--synthetic"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ringtrain: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/run.toml"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ringtrain::test
