// A running maximum with its sum of exponentials (the online softmax's pair: one pass over the
// values, the sum rescaled when the maximum grows) and the merge of two such pairs, shared by
// the CUDA loss over a vocabulary (kernels/loss_kernels.cu) and the unit test
// that checks it on the CPU against a direct log-sum-exp. Merges are commutative, so a butterfly
// gives every lane the same bits. Host-only header (RT_HOST_DEVICE as in update_rules.hpp).
#pragma once
#include <cmath>

#include "ringtrain/optim/update_rules.hpp"

namespace ringtrain {

// sum * exp(max - to), 0 for an empty sum (whose max is -inf).
RT_HOST_DEVICE inline float rescaled_sum(float sum, float max, float to) {
  return sum == 0.0f ? 0.0f : sum * expf(max - to);
}

// Adds exp(z - max) to a running (max, sum), raising the maximum first when z exceeds it. A NaN
// makes the sum NaN; -inf adds nothing.
RT_HOST_DEVICE inline void add_exp(float& max, float& sum, float z) {
  if (z > max) {
    sum = rescaled_sum(sum, max, z) + 1.0f;
    max = z;
  } else if (z != -INFINITY) {
    sum += expf(z - max);
  }
}

// (max, sum) := the pair over both sets of values.
RT_HOST_DEVICE inline void merge_exp(float& max, float& sum, float other_max, float other_sum) {
  const float m = fmaxf(max, other_max);
  sum = rescaled_sum(sum, max, m) + rescaled_sum(other_sum, other_max, m);
  max = m;
}

}  // namespace ringtrain
