// host_parallel: every piece runs once, on a worker below workers(); a cap of one keeps them on
// the caller; ranges cover [0, n); a piece's exception comes back after the rest ran; no
// nesting; and the workers that are not the caller block every signal (they run oneDNN's
// kernels too: onednn_sgemm.cpp says why).
#include <gtest/gtest.h>

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tensor/blas.hpp"
#include "tensor/host_parallel.hpp"

namespace ringtrain {
namespace {

// Runs the test body with the rank's compute threads at 2, as runtime.threads = 2 would.
class HostParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    before_ = blas::threads();
    blas::set_threads(2);
    if (host_parallel::workers(1000) < 2) GTEST_SKIP() << "a build without oneDNN runs every loop on the caller";
  }
  void TearDown() override { blas::set_threads(before_); }
  int before_ = 1;
};

// Called by a piece on the caller's thread: holds it until another thread has taken a piece
// (counted in `elsewhere`), at most 10 s. On a machine busy with other work the second worker
// may otherwise not be scheduled before the caller has run every piece itself.
void wait_for_another_thread(const std::atomic<int>& elsewhere) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (elsewhere.load() == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST_F(HostParallel, EveryPieceRunsOnceOnAWorkerBelowTheCount) {
  EXPECT_EQ(host_parallel::workers(1000), 2);
  EXPECT_EQ(host_parallel::workers(1), 1);
  std::vector<std::atomic<int>> runs(1000);
  std::atomic<int> bad_worker{0};
  std::atomic<int> on_other_thread{0};
  const pthread_t caller = pthread_self();
  host_parallel::for_each(1000, [&](std::int64_t piece, int worker) {
    runs[static_cast<std::size_t>(piece)].fetch_add(1);
    if (worker < 0 || worker >= 2) bad_worker.fetch_add(1);
    if (pthread_equal(pthread_self(), caller) == 0)
      on_other_thread.fetch_add(1);
    else
      wait_for_another_thread(on_other_thread);
  });
  for (const auto& r : runs) EXPECT_EQ(r.load(), 1);
  EXPECT_EQ(bad_worker.load(), 0);
  EXPECT_GT(on_other_thread.load(), 0) << "no piece ran on a second thread";
}

TEST_F(HostParallel, ACapOfOneRunsEveryPieceOnTheCaller) {
  EXPECT_EQ(host_parallel::workers(1000, 1), 1);
  std::atomic<int> elsewhere{0}, ran{0};
  const pthread_t caller = pthread_self();
  host_parallel::for_each(
      1000,
      [&](std::int64_t, int worker) {
        ran.fetch_add(1);
        if (worker != 0 || pthread_equal(pthread_self(), caller) == 0) elsewhere.fetch_add(1);
      },
      1);
  EXPECT_EQ(ran.load(), 1000);
  EXPECT_EQ(elsewhere.load(), 0);
}

TEST_F(HostParallel, RangesCoverTheSpanInGrainSteps) {
  std::vector<std::atomic<int>> covered(1003);
  std::atomic<int> longer{0};
  host_parallel::for_ranges(1003, 100, [&](std::int64_t begin, std::int64_t end) {
    if (end - begin > 100 || begin % 100 != 0) longer.fetch_add(1);
    for (std::int64_t i = begin; i < end; ++i) covered[static_cast<std::size_t>(i)].fetch_add(1);
  });
  for (const auto& c : covered) EXPECT_EQ(c.load(), 1);
  EXPECT_EQ(longer.load(), 0);
  host_parallel::for_ranges(0, 100, [](std::int64_t, std::int64_t) { FAIL() << "an empty span has no range"; });
}

TEST_F(HostParallel, APiecesExceptionComesBackAfterTheOthersRan) {
  std::atomic<int> ran{0};
  EXPECT_THROW(host_parallel::for_each(64,
                                       [&](std::int64_t piece, int) {
                                         ran.fetch_add(1);
                                         if (piece == 7) throw std::runtime_error("piece 7");
                                       }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 64);
}

TEST_F(HostParallel, LoopsInsideALoopRunOnTheirWorker) {
  std::atomic<int> nested_workers{0};
  host_parallel::for_each(4, [&](std::int64_t, int) { nested_workers.fetch_add(host_parallel::workers(1000)); });
  EXPECT_EQ(nested_workers.load(), 4);
}

TEST_F(HostParallel, WorkersOtherThanTheCallerBlockEverySignal) {
  std::atomic<int> unblocked{0};
  std::atomic<int> others{0};
  const pthread_t caller = pthread_self();
  host_parallel::for_each(256, [&](std::int64_t, int) {
    if (pthread_equal(pthread_self(), caller) != 0) return wait_for_another_thread(others);
    others.fetch_add(1);
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, nullptr, &mask);
    if (sigismember(&mask, SIGTERM) != 1 || sigismember(&mask, SIGUSR1) != 1 || sigismember(&mask, SIGPROF) != 1)
      unblocked.fetch_add(1);
  });
  EXPECT_GT(others.load(), 0);
  EXPECT_EQ(unblocked.load(), 0);
}

}  // namespace
}  // namespace ringtrain
