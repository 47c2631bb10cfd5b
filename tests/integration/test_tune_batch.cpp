// `ringtrain tune batch` end to end on the MLP example: table and JSON on 1 and 2 ranks (every
// rank agreeing on the choice), runtime.backend = cuda (the GPU search, or the CPU without a
// GPU), a memory limit that stops the search before the first size over it, one too small for
// any size, and a malformed limit (one-line errors).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "integration/run_command.hpp"

namespace ringtrain::test {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> tune_args(const std::vector<std::string>& extra) {
  const fs::path data = RINGTRAIN_DATA_DIR;
  std::vector<std::string> args{"tune",
                                "batch",
                                std::string(RINGTRAIN_SOURCE_DIR) + "/examples/fashion_mnist/mlp.toml",
                                "--set",
                                "data.train=" + (data / "train.h5").string(),
                                "--steps",
                                "3",
                                "--max-batch",
                                "256"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The JSON object rank 0 prints (the only line that starts with '{').
nlohmann::json json_of(const CommandResult& r) {
  for (const auto& line : lines_of(r.output))
    if (!line.empty() && line.front() == '{') return nlohmann::json::parse(line);
  ADD_FAILURE() << "no JSON line in:\n" << r.output;
  return {};
}

std::vector<std::int64_t> batches_of(const nlohmann::json& j) {
  std::vector<std::int64_t> out;
  for (const auto& row : j["rows"]) out.push_back(row["batch"].get<std::int64_t>());
  return out;
}

std::vector<std::string> error_lines(const std::string& output) {
  std::vector<std::string> out;
  for (const auto& line : lines_of(output))
    if (line.find("ringtrain: error:") != std::string::npos) out.push_back(line);
  return out;
}

class TuneBatch : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(fs::path(RINGTRAIN_DATA_DIR) / "train.h5")) << "fixture prepare_fashion_mnist did not run";
  }
};

TEST_F(TuneBatch, JsonOnOneAndTwoRanksTimesEveryPowerOfTwoAndAgreesOnTheChoice) {
  for (int ranks : {1, 2}) {
    const auto r = run_ringtrain(ranks, tune_args({"--json"}));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = json_of(r);
    EXPECT_EQ(j["world_size"], ranks);
    EXPECT_EQ(batches_of(j), (std::vector<std::int64_t>{8, 16, 32, 64, 128, 256}));
    EXPECT_EQ(j["stopped"]["reason"], "max_batch");
    EXPECT_EQ(j["stopped"]["batch"], 512);
    EXPECT_TRUE(j["ranks_agree"].get<bool>());
    const auto chosen = j["choice"]["batch"].get<std::int64_t>();
    const auto batches = batches_of(j);
    EXPECT_NE(std::find(batches.begin(), batches.end(), chosen), batches.end()) << chosen;
    EXPECT_EQ(j["choice"]["global_batch"], chosen * ranks);
    EXPECT_FALSE(j["choice"]["reason"].get<std::string>().empty());
    for (const auto& row : j["rows"]) {
      EXPECT_GT(row["samples_per_s_per_rank"].get<double>(), 0.0);
      EXPECT_LE(row["measured_bytes"].get<double>(), j["memory_limit_bytes"].get<double>());
    }
  }
}

TEST_F(TuneBatch, TablePrintsEveryRowAndExplainsTheChoice) {
  const auto r = run_ringtrain(1, tune_args({}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* expected : {"memory limit per rank:", "samples/s/rank", "stopped: batch 512 is over --max-batch 256",
                               "choice: batch ", "train.batch_size = 64"})
    EXPECT_NE(r.output.find(expected), std::string::npos) << expected << " missing in:\n" << r.output;
  const std::regex row(R"(^\s*\d+\s+[0-9.]+ [KM]iB\s+[0-9.]+ [KM]iB\s+[0-9.]+\s+\d+\s+\d+\s+\S+$)");
  int rows = 0;
  for (const auto& line : lines_of(r.output)) rows += std::regex_match(line, row) ? 1 : 0;
  EXPECT_EQ(rows, 6) << r.output;
}

TEST_F(TuneBatch, MemoryLimitStopsBeforeTheFirstSizeOverIt) {
  const auto unlimited = json_of(run_ringtrain(1, tune_args({"--json"})));
  ASSERT_EQ(unlimited["rows"].size(), 6u);
  // Between what batches 64 and 128 needed: 8 to 64 fit, 128 must not even be allocated.
  const double limit =
      (unlimited["rows"][3]["measured_bytes"].get<double>() + unlimited["rows"][4]["measured_bytes"].get<double>()) / 2;
  const auto r = run_ringtrain(1, tune_args({"--json", "--memory-limit", std::to_string(static_cast<long>(limit))}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = json_of(r);
  EXPECT_EQ(batches_of(j), (std::vector<std::int64_t>{8, 16, 32, 64}));
  EXPECT_EQ(j["stopped"]["reason"], "memory_limit");
  EXPECT_EQ(j["stopped"]["batch"], 128);
  EXPECT_NE(j["stopped"]["message"].get<std::string>().find("over the memory limit"), std::string::npos);
  for (const auto& row : j["rows"]) {
    EXPECT_LE(row["estimated_bytes"].get<double>(), limit);
    EXPECT_LE(row["measured_bytes"].get<double>(), limit);
  }
}

// runtime.backend = cuda: on a GPU the sizes are allocated there (limit: the GPU's total);
// without one every rank warns, binds the CPU and runs the CPU search. The MLP's sizes up to 256
// fit either way, so the rows and the stop are the same.
TEST_F(TuneBatch, CudaBackendSearchesOnTheGpuOrFallsBackToTheCpu) {
  const auto r = run_ringtrain(2, tune_args({"--json", "--set", "runtime.backend=cuda"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = json_of(r);
  const std::string backend = j["backend"].get<std::string>();
  if (backend == "cpu") {
    EXPECT_NE(r.output.find("falling back to the CPU backend"), std::string::npos) << r.output;
    EXPECT_NE(j["memory_limit_source"].get<std::string>().find("MemAvailable"), std::string::npos);
  } else {
    EXPECT_EQ(backend, "cuda");
    EXPECT_EQ(j["memory_limit_source"], "the GPU's total memory, smallest over ranks");
  }
  EXPECT_EQ(batches_of(j), (std::vector<std::int64_t>{8, 16, 32, 64, 128, 256}));
  EXPECT_EQ(j["stopped"]["reason"], "max_batch");
  EXPECT_TRUE(j["notes"].empty()) << j["notes"].dump();  // no "searching on CPU instead" note
  for (const auto& row : j["rows"]) {
    EXPECT_GT(row["measured_bytes"].get<double>(), 0.0);
    EXPECT_LE(row["measured_bytes"].get<double>(), j["memory_limit_bytes"].get<double>());
  }
}

TEST_F(TuneBatch, LimitBelowTheSmallestBatchIsOneError) {
  const auto r = run_ringtrain(2, tune_args({"--memory-limit", "64KiB"}));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const auto errors = error_lines(r.output);
  ASSERT_EQ(errors.size(), 1u) << r.output;
  EXPECT_NE(errors[0].find("no batch size to time: batch 8 would need an estimated"), std::string::npos) << errors[0];
}

TEST_F(TuneBatch, MalformedLimitIsOneError) {
  const auto r = run_ringtrain(2, tune_args({"--memory-limit", "12XB"}));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const auto errors = error_lines(r.output);
  ASSERT_EQ(errors.size(), 1u) << r.output;
  EXPECT_NE(errors[0].find("--memory-limit: '12XB' is not a byte size"), std::string::npos) << errors[0];
}

}  // namespace
}  // namespace ringtrain::test
