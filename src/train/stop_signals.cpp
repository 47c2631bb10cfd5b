// StopSignals (see header): an async-signal-safe flag set with sigaction; SA_RESTART so that
// system calls interrupted by the signal (file reads, MPI progress) simply continue.
#include "train/stop_signals.hpp"

#include <csignal>
#include <cstring>

#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {

volatile std::sig_atomic_t g_received = 0;
bool g_keep_until_exit = false;
constexpr int kSignals[] = {SIGTERM, SIGUSR1};
struct sigaction g_previous[2];

extern "C" void record_stop_signal(int signal) {
  if (g_received == 0) g_received = signal;
}

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  g_keep_until_exit = false;
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = record_stop_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 2; ++i)
    RT_REQUIRE(sigaction(kSignals[i], &action, &g_previous[i]) == 0, Error, "cannot install a handler for {}: {}",
               name(kSignals[i]), std::strerror(errno));
}

StopSignals::~StopSignals() {
  if (g_keep_until_exit) return;
  for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
}

void StopSignals::keep_until_exit() { g_keep_until_exit = true; }

int StopSignals::received() { return g_received; }

const char* StopSignals::name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

}  // namespace ringtrain
