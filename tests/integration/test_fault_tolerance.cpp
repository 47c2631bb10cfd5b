// A rank that stalls (SIGSTOP) or dies (SIGKILL) in the middle of training must end the
// whole job with a clear message within comm.timeout_s + 30 s, never hang; at 2 and 4 ranks.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <future>
#include <thread>

#include "integration/run_command.hpp"

namespace ringtrain::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr double kTimeoutS = 5.0;

struct Fault {
  int signal;
  const char* name;
};

class FaultTolerance : public ::testing::TestWithParam<std::tuple<int, Fault>> {};

TEST_P(FaultTolerance, JobEndsWithAClearMessage) {
  const auto [ranks, fault] = GetParam();
  const fs::path data = RINGTRAIN_DATA_DIR;
  ASSERT_TRUE(fs::exists(data / "train.h5")) << "fixture prepare_fashion_mnist did not run";
  const fs::path run_dir =
      fs::temp_directory_path() / ("ringtrain-fault-" + std::string(fault.name) + "-np" + std::to_string(ranks));
  fs::remove_all(run_dir);
  auto job = std::async(std::launch::async, [&] {
    return run_ringtrain(ranks,
                         {"train", std::string(RINGTRAIN_SOURCE_DIR) + "/examples/fashion_mnist/mlp.toml", "--set",
                          "data.train=" + (data / "train.h5").string(), "--set", "data.test=", "--set",
                          "train.epochs=100", "--set", "train.log_every=1", "--set",
                          "comm.timeout_s=" + std::to_string(kTimeoutS), "--set", "run.dir=" + run_dir.string()},
                         180);
  });
  // Wait until training is under way, then hit the last rank.
  const auto start = Clock::now();
  while (lines_in(run_dir / "metrics.jsonl") < 5 && Clock::now() - start < std::chrono::seconds(90))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GE(lines_in(run_dir / "metrics.jsonl"), 5u) << "training never started";
  const auto pids = rank_pids(run_dir.string());
  ASSERT_EQ(pids.size(), static_cast<std::size_t>(ranks));
  const pid_t victim = pids.at(ranks - 1);
  const auto hit = Clock::now();
  ASSERT_EQ(::kill(victim, fault.signal), 0);
  const auto r = job.get();
  const double seconds = std::chrono::duration<double>(Clock::now() - hit).count();
  for (const auto& [rank, pid] : rank_pids(run_dir.string())) ::kill(pid, SIGKILL);  // never leave strays
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(seconds, kTimeoutS + 30.0) << r.output;
  if (fault.signal == SIGSTOP) {
    EXPECT_NE(r.output.find("did not finish within comm.timeout_s"), std::string::npos) << r.output;
  } else {  // the launcher reports the dead rank, or a survivor's watchdog does
    const bool launcher =
        r.output.find("signal 9") != std::string::npos || r.output.find("Killed") != std::string::npos;
    const bool watchdog = r.output.find("did not finish within comm.timeout_s") != std::string::npos;
    EXPECT_TRUE(launcher || watchdog) << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, FaultTolerance,
                         ::testing::Combine(::testing::Values(2, 4),
                                            ::testing::Values(Fault{SIGSTOP, "stall"}, Fault{SIGKILL, "kill"})),
                         [](const auto& info) {
                           return std::string(std::get<1>(info.param).name) + "_np" +
                                  std::to_string(std::get<0>(info.param));
                         });

}  // namespace
}  // namespace ringtrain::test
