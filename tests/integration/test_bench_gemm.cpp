// `ringtrain bench gemm` through the real executable: the CPU JSON line, options of the other
// backend refused, and `--backend cuda` without a GPU warning and measuring the CPU, as training
// and every other benchmark do (skipped on a GPU machine: tools/device/check.sh runs it there).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "integration/run_command.hpp"

namespace ringtrain::test {
namespace {

bool gpu_machine() { return std::filesystem::exists("/dev/nvidia0"); }

// The lines of the output that start with `prefix`.
std::vector<std::string> lines_starting(const std::string& output, const std::string& prefix) {
  std::vector<std::string> found;
  for (const std::string& line : lines_of(output))
    if (line.rfind(prefix, 0) == 0) found.push_back(line);
  return found;
}

TEST(BenchGemm, CpuPrintsOneJsonLine) {
  const CommandResult r = run_ringtrain(1, {"bench", "gemm", "--size", "128", "--seconds", "0.05", "--repeats", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto json_lines = lines_starting(r.output, "{");
  ASSERT_EQ(json_lines.size(), 1u) << r.output;
  const auto j = nlohmann::json::parse(json_lines.front());
  EXPECT_EQ(j["bench"], "gemm");
  EXPECT_EQ(j["size"], 128);
  EXPECT_EQ(j["ranks"], 1);
  EXPECT_EQ(j["gflops_aggregate_runs"].size(), 3u);
  EXPECT_GT(j["gflops_aggregate"].get<double>(), 0.0);
  EXPECT_EQ(j["backend"], "cpu");
  // The library that computed it, which the CPU chooses (src/tensor/blas.hpp), with its threads.
  const auto library = j["library"].get<std::string>();
  EXPECT_TRUE(library.rfind("OpenBLAS ", 0) == 0 || library.rfind("oneDNN ", 0) == 0) << library;
  const int threads = j["threads_per_rank"].get<int>();
  const std::string suffix = ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  EXPECT_EQ(library.substr(library.size() - std::min(library.size(), suffix.size())), suffix) << library;
}

// More threads than the rank's CPUs still measure, with one warning line that says how to launch.
TEST(BenchGemm, MoreThreadsThanTheRanksCpusAreWarnedAbout) {
  const int too_many = static_cast<int>(std::thread::hardware_concurrency()) + 1;
  const CommandResult r = run_ringtrain(1, {"bench", "gemm", "--size", "64", "--seconds", "0.05", "--repeats", "1",
                                            "--threads", std::to_string(too_many)});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto warnings = lines_starting(r.output, "ringtrain: warning:");
  ASSERT_EQ(warnings.size(), 1u) << r.output;
  EXPECT_NE(warnings.front().find("= " + std::to_string(too_many) + " but this rank is bound to"), std::string::npos)
      << warnings.front();
  EXPECT_EQ(lines_starting(r.output, "{").size(), 1u) << r.output;
}

// RINGTRAIN_SGEMM chooses the library by hand; a name it does not know is one error line.
TEST(BenchGemm, RingtrainSgemmChoosesTheLibrary) {
  const auto library_with = [](const std::string& setting) {
    return run_command("RINGTRAIN_SGEMM=" + setting + " " +
                       ringtrain_command(1, {"bench", "gemm", "--size", "64", "--seconds", "0.05", "--repeats", "1"}));
  };
  const CommandResult openblas = library_with("openblas");
  ASSERT_EQ(openblas.exit_code, 0) << openblas.output;
  EXPECT_NE(openblas.output.find("\"library\":\"OpenBLAS "), std::string::npos) << openblas.output;
  const CommandResult unknown = library_with("mkl");
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.output.find("ringtrain: error: RINGTRAIN_SGEMM: unknown library 'mkl' (auto, openblas, onednn)"),
            std::string::npos)
      << unknown.output;
}

TEST(BenchGemm, RefusesOptionsOfTheOtherBackend) {
  const std::vector<std::vector<std::string>> cases = {{"--dtype", "bf16"},
                                                       {"--calls", "5"},
                                                       {"--backend", "cuda", "--threads", "2"},
                                                       {"--backend", "cuda", "--seconds", "0.1"}};
  for (const auto& extra : cases) {
    std::vector<std::string> args = {"bench", "gemm", "--size", "64"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CommandResult r = run_ringtrain(1, args);
    SCOPED_TRACE(extra.front() + " " + extra.back());
    EXPECT_EQ(r.exit_code, 1) << r.output;
    const auto errors = lines_starting(r.output, "ringtrain: error:");
    ASSERT_EQ(errors.size(), 1u) << r.output;
    EXPECT_NE(errors.front().find("applies to --backend"), std::string::npos) << errors.front();
    EXPECT_EQ(r.output.find('{'), std::string::npos) << "no measurement expected:\n" << r.output;
  }
}

TEST(BenchGemm, CudaWithoutAGpuWarnsAndMeasuresTheCpu) {
  if (gpu_machine()) GTEST_SKIP() << "GPU machine: tools/device/check.sh runs bench gemm --backend cuda";
  for (int ranks : {1, 2}) {
    SCOPED_TRACE(std::to_string(ranks) + " rank(s)");
    const CommandResult r =
        run_ringtrain(ranks, {"bench", "gemm", "--backend", "cuda", "--size", "128", "--repeats", "1", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(lines_starting(r.output, "ringtrain: error:").empty()) << r.output;
    const auto warnings = lines_starting(r.output, "ringtrain: warning:");
    ASSERT_EQ(warnings.size(), static_cast<std::size_t>(ranks)) << "one per rank:\n" << r.output;
    EXPECT_NE(warnings.front().find("falling back to the CPU backend"), std::string::npos) << warnings.front();
    const auto json_lines = lines_starting(r.output, "{");
    ASSERT_EQ(json_lines.size(), 1u) << r.output;
    const auto j = nlohmann::json::parse(json_lines.front());
    EXPECT_EQ(j["backend"], "cpu");
    EXPECT_EQ(j["ranks"], ranks);
  }
}

}  // namespace
}  // namespace ringtrain::test
