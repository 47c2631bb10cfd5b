// Next-token sampling from a language model's logits: temperature, top-k, one seeded draw.
// The draw for the token at sequence position p comes from its own stream (seed, p), so a seed
// fixes the text whatever the thread count or how the logits were computed (KV cache or not).
#pragma once
#include <cstdint>

namespace ringtrain {

struct SamplingOptions {
  double temperature = 1.0;  // softmax(logits / temperature); 0: greedy (arg-max, lowest id on a tie)
  std::int64_t top_k = 0;    // draw among the k largest logits only (ties: lower ids first); 0: all
  std::uint64_t seed = 0;
};

// ConfigError for a temperature that is negative or not finite, or top_k < 0.
void check_sampling_options(const SamplingOptions& options);

// The token drawn from logits[0, vocab) for sequence position `position` (its index in prompt +
// continuation); the options are checked as above.
std::int32_t sample_token(const float* logits, std::int64_t vocab, const SamplingOptions& options,
                          std::int64_t position);

}  // namespace ringtrain
