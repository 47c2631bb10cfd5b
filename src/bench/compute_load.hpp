// Private: a busy neighbour for the benchmarks. ComputeLoad keeps `threads` threads computing
// (floating-point arithmetic on a cache-resident array, no memory traffic to speak of, no
// system calls) from construction to destruction, so that a measurement shows how a collective
// fares when its cores are shared with a compute-bound job (an oversubscribed or shared node).
#pragma once
#include <atomic>
#include <thread>
#include <vector>

namespace ringtrain {

class ComputeLoad {
 public:
  explicit ComputeLoad(int threads);
  ~ComputeLoad();  // stops and joins the threads
  ComputeLoad(const ComputeLoad&) = delete;
  ComputeLoad& operator=(const ComputeLoad&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace ringtrain
