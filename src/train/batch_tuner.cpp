// Batch-size search logic: byte-size parsing, /proc fields, the linear memory
// model and the stop rule of the search, and the knee rule (see batch_tuner.hpp).
#include "ringtrain/train/batch_tuner.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct Unit {
  std::string_view name;
  double bytes;
};
constexpr std::array<Unit, 15> kUnits{{{"", 1.0},
                                       {"b", 1.0},
                                       {"k", 0x1.0p10},
                                       {"kib", 0x1.0p10},
                                       {"kb", 1e3},
                                       {"m", 0x1.0p20},
                                       {"mib", 0x1.0p20},
                                       {"mb", 1e6},
                                       {"g", 0x1.0p30},
                                       {"gib", 0x1.0p30},
                                       {"gb", 1e9},
                                       {"t", 0x1.0p40},
                                       {"tib", 0x1.0p40},
                                       {"tb", 1e12},
                                       {"bytes", 1.0}}};

}  // namespace

std::int64_t parse_byte_size(std::string_view text) {
  const std::string_view s = trim(text);
  const auto number_end = std::find_if_not(
      s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '.'; });
  const std::string number(s.begin(), number_end);
  const std::string unit =
      lowercase(trim(std::string_view(number_end, static_cast<std::size_t>(s.end() - number_end))));
  char* parsed_end = nullptr;
  const double value = number.empty() ? 0.0 : std::strtod(number.c_str(), &parsed_end);
  const bool number_ok = !number.empty() && parsed_end == number.c_str() + number.size();
  const auto u = std::find_if(kUnits.begin(), kUnits.end(), [&](const Unit& x) { return x.name == unit; });
  RT_REQUIRE(number_ok && u != kUnits.end(), ConfigError,
             "'{}' is not a byte size (examples: 2GiB, 512MiB, 1.5GB, 1000000)", text);
  const double bytes = std::floor(value * u->bytes);
  RT_REQUIRE(bytes >= 1.0 && bytes < 0x1.0p62, ConfigError, "'{}' is not a positive byte size below 4 EiB", text);
  return static_cast<std::int64_t>(bytes);
}

std::int64_t proc_kib_field_bytes(std::string_view text, std::string_view key) {
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ':') continue;
    const std::string value(trim(line.substr(key.size() + 1)));
    char* unit = nullptr;
    const long long kib = std::strtoll(value.c_str(), &unit, 10);
    if (unit == value.c_str() || kib < 0 || trim(unit) != "kB") return -1;
    return static_cast<std::int64_t>(kib) * 1024;
  }
  return -1;
}

std::int64_t default_memory_limit(std::int64_t available_bytes, int local_ranks) {
  return static_cast<std::int64_t>(kDefaultMemoryShare * static_cast<double>(available_bytes) /
                                   static_cast<double>(std::max(1, local_ranks)));
}

MemoryModel MemoryModel::fit(double fixed, double total, std::int64_t batch) {
  return MemoryModel{fixed, std::max(0.0, total - fixed) / static_cast<double>(std::max<std::int64_t>(1, batch))};
}

SearchStop search_stop(std::int64_t batch, std::int64_t max_batch, std::int64_t max_by_dataset, double estimated_bytes,
                       std::int64_t memory_limit) {
  if (batch > max_batch) return SearchStop::max_batch;
  if (batch > max_by_dataset) return SearchStop::dataset;
  if (estimated_bytes > static_cast<double>(memory_limit)) return SearchStop::memory_limit;
  return SearchStop::none;
}

double throughput_gain(const BatchPoint& before, const BatchPoint& after) {
  return after.samples_per_s / before.samples_per_s - 1.0;
}

KneeChoice choose_knee(const std::vector<BatchPoint>& points) {
  RT_REQUIRE(!points.empty(), Error, "choose_knee: no batch sizes were timed");
  const std::size_t last = points.size() - 1;
  if (last == 0) return {0, "the only batch size tried"};
  // Against the best larger size, not just the next one: a single noisy dip or flat step on a
  // shared machine then moves the knee neither up nor down.
  for (std::size_t i = 0; i < last; ++i) {
    const auto best =
        std::max_element(points.begin() + static_cast<std::ptrdiff_t>(i) + 1, points.end(),
                         [](const BatchPoint& a, const BatchPoint& b) { return a.samples_per_s < b.samples_per_s; });
    const double gain = throughput_gain(points[i], *best);
    if (gain < kKneeMinGain)
      return {i, fmt::format("no larger batch is {:.0f}% or more faster (the best, {}, is {:+.1f}%)",
                             100.0 * kKneeMinGain, best->batch, 100.0 * gain)};
  }
  return {last, fmt::format("every smaller batch is {:.0f}% or more slower than a larger one (doubling into it: "
                            "{:+.1f}%): the largest batch tried",
                            100.0 * kKneeMinGain, 100.0 * throughput_gain(points[last - 1], points[last]))};
}

}  // namespace ringtrain
