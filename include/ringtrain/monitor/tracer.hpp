// Tracer: per-rank timeline spans (data wait, forward, backward, each bucket's allreduce,
// optimizer, ...) written as Chrome/Perfetto trace JSON ("X" complete events, pid = rank,
// tid = thread role). Thread-safe; a disabled tracer records nothing and costs one branch.
#pragma once
#include <chrono>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace ringtrain {

class Tracer {
 public:
  using Clock = std::chrono::steady_clock;
  enum Track : int { kCompute = 0, kComm = 1 };  // the trace's "threads"

  Tracer(bool enabled, int rank);
  bool enabled() const { return enabled_; }
  void span(std::string_view name, std::string_view category, Clock::time_point begin, Clock::time_point end,
            Track track = kCompute);
  // Writes this rank's spans as a complete trace file (IoError naming the path).
  void write(const std::string& path) const;
  // Merges per-rank trace files into one (rank 0, after every rank wrote its own).
  static void merge(const std::vector<std::string>& inputs, const std::string& output);

 private:
  struct Span {
    std::string name, category;
    double begin_us, duration_us;
    int track;
  };
  bool enabled_;
  int rank_;
  Clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<Span> spans_;
};

}  // namespace ringtrain
