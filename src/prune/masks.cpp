// Mask selection. Elements are ranked by one 64-bit key per element: |w|'s float bits (sign
// cleared, so integer order is magnitude order) in the top 31 bits, then "not masked yet",
// then the position: a strict total order, so nth_element picks the same set everywhere.
#include <algorithm>
#include <bit>
#include <cmath>
#include <tuple>

#include "ringtrain/core/error.hpp"
#include "ringtrain/prune/pruner.hpp"

namespace ringtrain {
namespace {

std::int64_t pruned_count(double sparsity, std::int64_t n) {
  return std::clamp<std::int64_t>(std::llround(sparsity * static_cast<double>(n)), 0, n);
}

}  // namespace

void mask_smallest_magnitudes(const float* params, float* mask, const std::vector<ArenaRange>& ranges,
                              double sparsity) {
  std::vector<std::int64_t> starts;  // position of each range's first element among all of them
  std::int64_t n = 0;
  for (const ArenaRange& r : ranges) {
    starts.push_back(n);
    n += r.count;
  }
  RT_REQUIRE(n < (std::int64_t{1} << 32), Error, "prune: {} weights in one group; at most 2^32 are supported", n);
  std::vector<std::uint64_t> keys;
  keys.reserve(static_cast<std::size_t>(n));
  std::uint64_t position = 0;
  for (const ArenaRange& r : ranges)
    for (std::int64_t i = r.offset; i < r.offset + r.count; ++i, ++position) {
      const std::uint64_t magnitude = std::bit_cast<std::uint32_t>(params[i]) & 0x7fffffffu;
      const std::uint64_t kept = mask[i] != 0.0f ? 1 : 0;
      keys.push_back(magnitude << 33 | kept << 32 | position);
    }
  for (const ArenaRange& r : ranges) std::fill(mask + r.offset, mask + r.offset + r.count, 1.0f);
  const std::int64_t k = pruned_count(sparsity, n);
  if (k == 0) return;
  std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end());
  for (std::int64_t j = 0; j < k; ++j) {
    const auto pos = static_cast<std::int64_t>(keys[static_cast<std::size_t>(j)] & 0xffffffffu);
    const std::size_t r =
        static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), pos) - starts.begin()) - 1;
    mask[ranges[r].offset + (pos - starts[r])] = 0.0f;
  }
}

void mask_smallest_neurons(const float* params, float* mask, const NeuronRange& layer, double sparsity) {
  std::vector<std::tuple<double, int, std::int64_t>> rows;  // (L2 norm, not masked yet, row)
  for (std::int64_t r = 0; r < layer.rows; ++r) {
    const float* w = params + layer.weight_offset + r * layer.cols;
    double sum = 0.0;
    for (std::int64_t c = 0; c < layer.cols; ++c) sum += static_cast<double>(w[c]) * w[c];
    rows.emplace_back(std::sqrt(sum), mask[layer.weight_offset + r * layer.cols] != 0.0f ? 1 : 0, r);
  }
  auto set_row = [&](std::int64_t r, float value) {
    std::fill_n(mask + layer.weight_offset + r * layer.cols, layer.cols, value);
    if (layer.bias_offset >= 0) mask[layer.bias_offset + r] = value;
  };
  for (std::int64_t r = 0; r < layer.rows; ++r) set_row(r, 1.0f);
  const std::int64_t k = pruned_count(sparsity, layer.rows);
  if (k == 0) return;
  std::nth_element(rows.begin(), rows.begin() + (k - 1), rows.end());
  for (std::int64_t j = 0; j < k; ++j) set_row(std::get<2>(rows[static_cast<std::size_t>(j)]), 0.0f);
}

}  // namespace ringtrain
