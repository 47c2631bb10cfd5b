// Private: the statistics the benchmarks and `tune batch` share: every rank's value of a
// measurement, its median and extremes, the ranks where something happened, and (from core)
// byte sizes for people. Medians of an even count are the mean of the middle two.
#pragma once
#include <string>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/bytes.hpp"
#include "ringtrain/runtime/context.hpp"

namespace ringtrain {

// Every rank's value, in rank order, on every rank (collective; each slot is summed with zeros
// only, so the values are exact).
std::vector<double> gather(Communicator& comm, const Context& ctx, double mine);

// Non-empty v. With times from gather, max_of is the slowest rank's.
double median(std::vector<double> v);
double max_of(const std::vector<double>& v);
double min_of(const std::vector<double>& v);

// The ranks where `flag` is set, on every rank (collective).
std::vector<int> ranks_where(Communicator& comm, const Context& ctx, bool flag);
// "rank 3", "ranks 0, 2".
std::string ranks_text(const std::vector<int>& ranks);

}  // namespace ringtrain
