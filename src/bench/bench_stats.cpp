// The shared benchmark statistics (see bench_stats.hpp).
#include "bench/bench_stats.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace ringtrain {

std::vector<double> gather(Communicator& comm, const Context& ctx, double mine) {
  std::vector<double> all(static_cast<std::size_t>(ctx.world_size()), 0.0);
  all[static_cast<std::size_t>(ctx.world_rank())] = mine;
  comm.allreduce_sum(all.data(), all.size(), DType::f64);
  return all;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : 0.5 * (v[mid - 1] + v[mid]);
}

double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

std::vector<int> ranks_where(Communicator& comm, const Context& ctx, bool flag) {
  const std::vector<double> all = gather(comm, ctx, flag ? 1.0 : 0.0);
  std::vector<int> ranks;
  for (std::size_t rank = 0; rank < all.size(); ++rank)
    if (all[rank] > 0.0) ranks.push_back(static_cast<int>(rank));
  return ranks;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank" : "ranks";
  for (std::size_t i = 0; i < ranks.size(); ++i) text += fmt::format("{}{}", i == 0 ? " " : ", ", ranks[i]);
  return text;
}

}  // namespace ringtrain
