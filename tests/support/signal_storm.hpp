// Runs work while SIGUSR1 interrupts a thread again and again (the calling one, or one given):
// a stop signal (Slurm's SIGTERM before preemption, a profiler's SIGPROF) may land between any
// two instructions of a kernel, on any thread that computes it, and a kernel must give the same
// results when it does.
#pragma once
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <functional>
#include <stdexcept>
#include <thread>

namespace ringtrain::test {

inline std::atomic<int>& signals_received() {
  static std::atomic<int> count{0};
  return count;
}

// What a storm did: signals sent, and received by the handler (which only counts).
struct Storm {
  int sent = 0, received = 0;
};

// Calls work() while another thread calls send() (which sends one SIGUSR1 and says whether it
// went out) every `interval`. SIGUSR1's previous handler is restored, also when work() throws.
inline Storm signal_storm(std::chrono::microseconds interval, const std::function<bool()>& send,
                          const std::function<void()>& work) {
  struct sigaction action {};
  struct sigaction previous {};
  action.sa_handler = [](int /*signal*/) { ++signals_received(); };
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGUSR1, &action, &previous) != 0) throw std::runtime_error("sigaction(SIGUSR1) failed");
  signals_received() = 0;
  std::atomic<bool> done{false};
  std::atomic<int> sent{0};
  std::thread sender([&] {
    while (!done) {
      if (send()) ++sent;
      std::this_thread::sleep_for(interval);
    }
  });
  auto stop = [&] {
    done = true;
    sender.join();
    sigaction(SIGUSR1, &previous, nullptr);
  };
  try {
    work();
  } catch (...) {
    stop();
    throw;
  }
  stop();
  return Storm{sent, signals_received()};
}

// Calls work() while SIGUSR1 interrupts this thread every `interval`; returns how many signals
// the handler received.
inline int with_signal_storm(std::chrono::microseconds interval, const std::function<void()>& work) {
  const pthread_t computing = pthread_self();
  return signal_storm(
             interval, [computing] { return pthread_kill(computing, SIGUSR1) == 0; }, work)
      .received;
}

// Calls work() while SIGUSR1 goes every `interval` to the thread whose kernel thread id is `tid`
// (e.g. a library's worker thread); returns how many were sent.
inline int with_signal_storm_on(pid_t tid, std::chrono::microseconds interval, const std::function<void()>& work) {
  return signal_storm(
             interval, [tid] { return syscall(SYS_tgkill, getpid(), tid, SIGUSR1) == 0; }, work)
      .sent;
}

}  // namespace ringtrain::test
