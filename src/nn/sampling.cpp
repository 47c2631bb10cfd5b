// sample_token: arg-max at temperature 0; otherwise the top-k candidates in id order, weights
// exp((logit - max) / T) summed in double, and one 53-bit uniform draw walked along their
// cumulative sum (inverse-CDF sampling: one draw per token, so streams never drift).
#include "ringtrain/nn/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/random.hpp"

namespace ringtrain {

void check_sampling_options(const SamplingOptions& o) {
  RT_REQUIRE(std::isfinite(o.temperature) && o.temperature >= 0.0, ConfigError,
             "sampling: temperature must be a finite number >= 0 (0 = greedy), got {}", o.temperature);
  RT_REQUIRE(o.top_k >= 0, ConfigError, "sampling: top_k must be >= 0 (0 = all tokens), got {}", o.top_k);
}

std::int32_t sample_token(const float* logits, std::int64_t vocab, const SamplingOptions& o, std::int64_t position) {
  check_sampling_options(o);
  if (o.temperature == 0.0) return static_cast<std::int32_t>(std::max_element(logits, logits + vocab) - logits);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  if (o.top_k > 0 && o.top_k < vocab) {
    const auto larger = [&](std::int32_t a, std::int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    std::nth_element(ids.begin(), ids.begin() + (o.top_k - 1), ids.end(), larger);
    ids.resize(static_cast<std::size_t>(o.top_k));
    std::sort(ids.begin(), ids.end());
  }
  float top = logits[ids.front()];
  for (const std::int32_t i : ids) top = std::max(top, logits[i]);
  std::vector<double> cumulative(ids.size());
  double total = 0.0;
  for (std::size_t j = 0; j < ids.size(); ++j) {
    total += std::exp(static_cast<double>(logits[ids[j]] - top) / o.temperature);
    cumulative[j] = total;
  }
  constexpr std::uint64_t kSampleStream = 0x5a3b'0000'0000'0000ull;
  Rng rng(stream_key(o.seed, kSampleStream, static_cast<std::uint64_t>(position)));
  const double target = static_cast<double>(rng.next() >> 11) * 0x1.0p-53 * total;
  const auto at = std::upper_bound(cumulative.begin(), cumulative.end(), target);
  return ids[static_cast<std::size_t>(std::min<std::ptrdiff_t>(at - cumulative.begin(), std::ssize(ids) - 1))];
}

}  // namespace ringtrain
