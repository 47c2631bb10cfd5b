// A running maximum with its sum of exponentials (the online softmax's pair: one pass over the
// values in runs, the sum rescaled when a run raises the maximum) and the merge of two such pairs,
// shared by the CUDA loss over a vocabulary (kernels/loss_kernels.cu, a run per 16-byte load) and
// the unit test that checks it on the CPU against a direct log-sum-exp. Merges are commutative, so a butterfly
// gives every lane the same bits. Host-only header (RT_HOST_DEVICE as in update_rules.hpp).
#pragma once
#include <cmath>

#include "ringtrain/optim/update_rules.hpp"

namespace ringtrain {

// sum * exp(max - to), 0 for an empty sum (whose max is -inf).
RT_HOST_DEVICE inline float rescaled_sum(float sum, float max, float to) {
  return sum == 0.0f ? 0.0f : sum * expf(max - to);
}

// Adds exp(v[e] - max) for a run of `count` values to a running (max, sum): the run's maximum
// first (one rescale a run, not a branch a value), then each exponential; the maximum itself adds
// exactly 1, -inf nothing, and a NaN makes the sum NaN.
RT_HOST_DEVICE inline void add_exps(float& max, float& sum, const float* v, int count) {
  float run_max = -INFINITY;
  for (int e = 0; e < count; ++e) run_max = fmaxf(run_max, v[e]);
  if (run_max > max) {
    sum = rescaled_sum(sum, max, run_max);
    max = run_max;
  }
  for (int e = 0; e < count; ++e)
    if (v[e] != -INFINITY) sum += v[e] == max ? 1.0f : expf(v[e] - max);
}

// (max, sum) := the pair over both sets of values.
RT_HOST_DEVICE inline void merge_exp(float& max, float& sum, float other_max, float other_sum) {
  const float m = fmaxf(max, other_max);
  sum = rescaled_sum(sum, max, m) + rescaled_sum(other_sum, other_max, m);
  max = m;
}

}  // namespace ringtrain
