// Private: what the benchmarks share: every rank's value of a measurement, and medians.
#pragma once
#include <algorithm>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/runtime/context.hpp"

namespace ringtrain {

// Every rank's value, in rank order (collective).
inline std::vector<double> gather(Communicator& comm, const Context& ctx, double mine) {
  std::vector<double> all(static_cast<std::size_t>(ctx.world_size()), 0.0);
  all[static_cast<std::size_t>(ctx.world_rank())] = mine;
  comm.allreduce_sum(all.data(), all.size(), DType::f64);
  return all;
}

inline double slowest(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace ringtrain
