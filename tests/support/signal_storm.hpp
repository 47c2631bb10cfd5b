// Runs work while SIGUSR1 interrupts the calling thread again and again: a stop signal (Slurm's
// SIGTERM before preemption, a profiler's SIGPROF) may land between any two instructions of a
// kernel, and a kernel must give the same results when it does.
#pragma once
#include <pthread.h>

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

// Calls work() while another thread sends SIGUSR1 to this thread every `interval`; returns how
// many signals the handler (which only counts) received. SIGUSR1's previous handler is restored.
inline int with_signal_storm(std::chrono::microseconds interval, const std::function<void()>& work) {
  struct sigaction action {};
  struct sigaction previous {};
  action.sa_handler = [](int /*signal*/) { ++signals_received(); };
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGUSR1, &action, &previous) != 0) throw std::runtime_error("sigaction(SIGUSR1) failed");
  signals_received() = 0;
  const pthread_t computing = pthread_self();
  std::atomic<bool> done{false};
  std::thread sender([&] {
    while (!done) {
      pthread_kill(computing, SIGUSR1);
      std::this_thread::sleep_for(interval);
    }
  });
  try {
    work();
  } catch (...) {
    done = true;
    sender.join();
    sigaction(SIGUSR1, &previous, nullptr);
    throw;
  }
  done = true;
  sender.join();
  sigaction(SIGUSR1, &previous, nullptr);
  return signals_received();
}

}  // namespace ringtrain::test
