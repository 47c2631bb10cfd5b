// A rank that stalls (SIGSTOP) or dies (SIGKILL) in the middle of training must end the
// whole job with a clear message within comm.timeout_s + 5 s (a stall reported after waiting
// at most 1.5x the timeout), never hang; at 2 and 4 ranks.
// A node whose /dev/shm is too small for the ring's segment or the dataset's node copy gets
// the MPI fallback or one agreed error line, never SIGBUS or a hang. A rank that runs out of
// memory anywhere in set-up fails every rank with the same line.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <future>
#include <iostream>
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
  const int ranks = std::get<0>(GetParam());    // plain variables: clang 14 cannot capture
  const Fault fault = std::get<1>(GetParam());  // structured bindings
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
  // The job ends within the timeout and a few seconds (the watchdog checks four times per
  // timeout; MPI_Abort and the launcher take the rest).
  EXPECT_LT(seconds, kTimeoutS + 5.0) << r.output;
  if (fault.signal == SIGSTOP) {
    const std::string within = "did not finish within comm.timeout_s = 5 s (waited ";
    const auto at = r.output.find(within);
    ASSERT_NE(at, std::string::npos) << r.output;
    const double waited = std::stod(r.output.substr(at + within.size()));
    EXPECT_GE(waited, kTimeoutS) << r.output;
    EXPECT_LE(waited, 1.5 * kTimeoutS) << r.output;
  } else {  // the launcher reports the dead rank, or a survivor's watchdog does
    const bool launcher =
        r.output.find("signal 9") != std::string::npos || r.output.find("Killed") != std::string::npos;
    const bool watchdog = r.output.find("did not finish within comm.timeout_s") != std::string::npos;
    EXPECT_TRUE(launcher || watchdog) << r.output;
  }
}

// A rank that stops during set-up (RINGTRAIN_TEST_STALL=open-datasets@1: rank 1 stops itself
// with SIGSTOP as the datasets are opened, as a rank stuck on a file system would) ends the job
// through the watchdog within its budget (comm.timeout_s + 1 s per 20 MB of data files) and a
// few seconds. Before: set-up was not watched and rank 0 waited in the phase's agreement forever.
TEST(SetUpStall, ARankStoppedWhileOpeningTheDataEndsTheJob) {
  const fs::path data = RINGTRAIN_DATA_DIR;
  const fs::path run_dir = fs::temp_directory_path() / "ringtrain-setup-stall";
  fs::remove_all(run_dir);
  ::setenv("RINGTRAIN_TEST_STALL", "open-datasets@1", 1);
  const auto start = Clock::now();
  const CommandResult r =
      run_ringtrain(2,
                    {"train", std::string(RINGTRAIN_SOURCE_DIR) + "/examples/fashion_mnist/mlp.toml", "--set",
                     "data.train=" + (data / "train.h5").string(), "--set", "data.test=", "--set",
                     "comm.timeout_s=" + std::to_string(kTimeoutS), "--set", "run.dir=" + run_dir.string()},
                    120);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ::unsetenv("RINGTRAIN_TEST_STALL");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 124) << "timed out:\n" << r.output;
  const double budget = kTimeoutS + static_cast<double>(fs::file_size(data / "train.h5")) / 20e6;
  EXPECT_LT(seconds, budget + 8.0) << r.output;  // + start-up and the abort
  EXPECT_NE(r.output.find("set-up: opening data.train and data.test did not finish within comm.timeout_s + 1 s per 20 "
                          "MB of data files = "),
            std::string::npos)
      << r.output;
}

// The job runs in its own mount namespace with a 1 MiB tmpfs on /dev/shm (needs root with
// CAP_SYS_ADMIN, as CI has; skipped otherwise). Before: the ring's segment was sized with
// ftruncate and the first touch of a missing page killed a rank with SIGBUS; a dataset's node
// copy failed inside MPI_Win_allocate_shared on one rank and the other waited until killed.
TEST(SmallDevShm, TheRingFallsBackAndTheDatasetCopyIsAnAgreedError) {
  const fs::path data = RINGTRAIN_DATA_DIR;
  const CommandResult probe = run_command(
      "unshare -m --propagation private sh -c 'mount -t tmpfs -o size=1m tmpfs "
      "/dev/shm && df --output=size -B1K /dev/shm | tail -n 1'");
  if (probe.exit_code != 0 || probe.output.find("1024") == std::string::npos)
    GTEST_SKIP() << "cannot mount a small /dev/shm in a mount namespace here: " << probe.output;
  const fs::path run_dir = fs::temp_directory_path() / "ringtrain-small-shm";
  fs::remove_all(run_dir);
  const auto train = [&](const std::string& strategy) {
    std::string cmd = ringtrain_command(
        2, {"train", std::string(RINGTRAIN_SOURCE_DIR) + "/examples/fashion_mnist/mlp.toml", "--set",
            "data.train=" + (data / "train.h5").string(), "--set", "data.test=", "--set", "data.strategy=" + strategy,
            "--set", "train.max_steps=3", "--set", "checkpoint.enabled=false", "--set", "run.dir=" + run_dir.string()});
    // Open MPI's own shared-memory transport cannot start in 1 MiB either: TCP between the ranks.
    const std::string vader = "--mca btl self,vader";
    cmd.replace(cmd.find(vader), vader.size(), "--mca btl self,tcp");
    return run_command("unshare -m --propagation private sh -c " +
                       shell_quote("mount -t tmpfs -o size=1m tmpfs /dev/shm && " + cmd));
  };
  const CommandResult memory = train("memory");
  EXPECT_EQ(memory.exit_code, 1) << memory.output;
  EXPECT_NE(memory.output.find("ringtrain: error: data.train: " + (data / "train.h5").string() +
                               ": the dataset needs 45 MiB of node-shared memory but /dev/shm on "),
            std::string::npos)
      << memory.output;
  const CommandResult stream = train("stream");
  EXPECT_EQ(stream.exit_code, 0) << stream.output;
  EXPECT_NE(stream.output.find("communicator: no shared memory for the ring (posix_fallocate"), std::string::npos)
      << stream.output;
}

// Every host tensor allocation of set-up fails in turn on rank 1 (RINGTRAIN_TEST_OOM=<n>: its
// n-th allocation throws std::bad_alloc, as an exhausted heap would), n = 1, 2, ... until set-up
// completes (rank 0 prints "setup:"). Each must end the job at once with exit 1 and the one
// agreed line from rank 0, never a rank left in a collective (a hang until the watchdog) or an
// MPI_Abort; the first allocation after set-up (in the training step, not agreed) still names
// the rank and says "out of memory" (before: "[rank 1] std::bad_alloc").
class SetUpOutOfMemory : public ::testing::TestWithParam<const char*> {};

TEST_P(SetUpOutOfMemory, EveryAllocationOfSetUpFailsAsOneAgreedError) {
  const fs::path data = RINGTRAIN_DATA_DIR;
  const fs::path run_dir = fs::temp_directory_path() / "ringtrain-setup-oom";
  const std::vector<std::string> args = {
      "train", std::string(RINGTRAIN_SOURCE_DIR) + "/examples/fashion_mnist/mlp.toml",
      "--set", "data.train=" + (data / "train.h5").string(),
      "--set", "data.test=" + (data / "test.h5").string(),
      "--set", "train.max_steps=2",
      "--set", "comm.timeout_s=60",
      "--set", "run.dir=" + run_dir.string(),
      "--set", GetParam()};
  // mpirun's MPMD form: rank 0 as usual, rank 1 with the hook set.
  std::string rank1 = " : -np 1 env RINGTRAIN_TEST_OOM=@N@ " + shell_quote(RINGTRAIN_EXE);
  for (const auto& a : args) rank1 += " " + shell_quote(a);
  int set_up_allocations = 0;
  for (int n = 1; n <= 200; ++n) {
    fs::remove_all(run_dir);
    std::string command = ringtrain_command(1, args, 90) + rank1;
    command.replace(command.find("@N@"), 3, std::to_string(n));
    const auto start = Clock::now();
    const CommandResult r = run_command(command);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    SCOPED_TRACE("RINGTRAIN_TEST_OOM=" + std::to_string(n) + " on rank 1");
    EXPECT_LT(seconds, 45.0) << r.output;  // well before comm.timeout_s: nobody waited for the watchdog
    if (r.output.find("\nsetup: ") == std::string::npos) {
      EXPECT_EQ(r.exit_code, 1) << r.output;
      EXPECT_NE(r.output.find("ringtrain: error: out of memory on rank 1 (host "), std::string::npos) << r.output;
      EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << r.output;
      if (::testing::Test::HasFailure()) return;
      set_up_allocations = n;
      continue;
    }
    EXPECT_NE(r.exit_code, 0) << r.output;  // the n-th allocation came after set-up: in the steps
    EXPECT_NE(r.output.find("ringtrain: error: [rank 1] out of memory (host "), std::string::npos) << r.output;
    // ... and what it was doing, with the key that sizes it
    EXPECT_NE(r.output.find(") in training step 0 (train.batch_size = 64 samples per rank"), std::string::npos)
        << r.output;
    break;
  }
  EXPECT_GE(set_up_allocations, 5) << "set-up made fewer host tensors than the model has layers";
  std::cout << "set-up allocations failed in turn: " << set_up_allocations << "\n";
}

INSTANTIATE_TEST_SUITE_P(Runs, SetUpOutOfMemory, ::testing::Values("train.zero_stage=0", "train.zero_stage=3"),
                         [](const auto& info) { return "zero_stage_" + std::string(info.param).substr(17); });

INSTANTIATE_TEST_SUITE_P(Ranks, FaultTolerance,
                         ::testing::Combine(::testing::Values(2, 4),
                                            ::testing::Values(Fault{SIGSTOP, "stall"}, Fault{SIGKILL, "kill"})),
                         [](const auto& info) {
                           return std::string(std::get<1>(info.param).name) + "_np" +
                                  std::to_string(std::get<0>(info.param));
                         });

}  // namespace
}  // namespace ringtrain::test
