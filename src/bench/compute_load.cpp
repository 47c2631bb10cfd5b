// ComputeLoad (compute_load.hpp): each thread runs multiply-adds over 4 KiB of floats until told
// to stop, checking the flag once per pass over the array (about a microsecond).
#include "bench/compute_load.hpp"

#include <array>

namespace ringtrain {
namespace {

void compute_until(const std::atomic<bool>& stop) {
  std::array<float, 1024> x{};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 1e-3f;
  while (!stop.load(std::memory_order_relaxed))
    for (float& v : x) v = v * 0.999f + 1e-3f;  // converges to 1: stays finite however long
  volatile float sink = x[0];                   // the result is used: the loop cannot be dropped
  (void)sink;
}

}  // namespace

ComputeLoad::ComputeLoad(int threads) {
  threads_.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) threads_.emplace_back([this] { compute_until(stop_); });
}

ComputeLoad::~ComputeLoad() {
  stop_ = true;
  for (std::thread& t : threads_) t.join();
}

}  // namespace ringtrain
