// Collective watchdog: every collective gets a sequence number and is registered while in
// flight; a monitor thread ends the job (through the handler, which aborts MPI) when one has
// not finished within the timeout, naming the operation, its sequence number and size —
// instead of a silent hang when a peer is stuck or dead.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace ringtrain {

class Communicator;

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // on_timeout receives a one-line description; it is expected not to return (it aborts).
  Watchdog(double timeout_s, std::function<void(const std::string&)> on_timeout);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // How long one operation may take, and the config key that set it (named in the message).
  struct Budget {
    double seconds;
    std::string key;
  };

  // The budget of an operation that moves `bytes` through a file system: `timeout_s` plus one
  // second per kSlowestBytesPerSecond (a file system slower than 20 MB/s is taken for stalled).
  // The key reads "comm.timeout_s + 1 s per 20 MB <what>".
  static constexpr double kSlowestBytesPerSecond = 20e6;
  static Budget scaled_by_bytes(double timeout_s, double bytes, const std::string& what) {
    return {timeout_s + bytes / kSlowestBytesPerSecond, "comm.timeout_s + 1 s per 20 MB " + what};
  }

  // Registers an operation as in flight until the returned id is passed to done(); it may
  // take the watchdog's timeout (comm.timeout_s), or `budget` when given.
  std::uint64_t begin(std::string description);
  std::uint64_t begin(std::string description, Budget budget);
  void done(std::uint64_t id);
  double timeout_s() const { return timeout_s_; }

 private:
  void monitor();

  struct InFlight {
    std::string description;
    Clock::time_point start;
    Budget budget;
  };

  double timeout_s_;
  std::function<void(const std::string&)> on_timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::uint64_t, InFlight> in_flight_;
  std::uint64_t next_id_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

// An operation watched for as long as this object lives (also when an exception ends it).
class WatchedScope {
 public:
  WatchedScope(Watchdog& watchdog, std::string description)
      : watchdog_(watchdog), id_(watchdog.begin(std::move(description))) {}
  WatchedScope(Watchdog& watchdog, std::string description, Watchdog::Budget budget)
      : watchdog_(watchdog), id_(watchdog.begin(std::move(description), std::move(budget))) {}
  ~WatchedScope() { watchdog_.done(id_); }
  WatchedScope(const WatchedScope&) = delete;
  WatchedScope& operator=(const WatchedScope&) = delete;

 private:
  Watchdog& watchdog_;
  std::uint64_t id_;
};

// Wraps a communicator so that each collective is numbered and watched (seq counts per
// communicator and is the same on every rank, so ranks can be matched up in messages).
std::unique_ptr<Communicator> watch_collectives(std::unique_ptr<Communicator> inner, Watchdog& watchdog,
                                                std::string label);

}  // namespace ringtrain
