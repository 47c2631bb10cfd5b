// Private to kernels/: a running maximum with its sum of exponentials, one pass over values
// (the sum rescaled when the maximum grows), and the merge of two such pairs; used by the
// softmax cross-entropy over a vocabulary and the attention's causal softmax. Merges are
// commutative (a butterfly gives every lane the same bits).
#pragma once
#include <cuda_runtime.h>

namespace ringtrain::kernels::detail {

// sum * exp(max - to), 0 for an empty sum (whose max is -inf).
__device__ inline float rescaled(float sum, float max, float to) { return sum == 0.0f ? 0.0f : sum * expf(max - to); }

// Adds exp(z - max) to a running (max, sum), raising the maximum first when z exceeds it. A NaN
// makes the sum NaN; -inf adds nothing.
__device__ inline void add_exp(float& max, float& sum, float z) {
  if (z > max) {
    sum = rescaled(sum, max, z) + 1.0f;
    max = z;
  } else if (z != -INFINITY) {
    sum += expf(z - max);
  }
}

// (max, sum) := the pair over both sets of values.
__device__ inline void merge_exp(float& max, float& sum, float other_max, float other_sum) {
  const float m = fmaxf(max, other_max);
  sum = rescaled(sum, max, m) + rescaled(other_sum, other_max, m);
  max = m;
}

}  // namespace ringtrain::kernels::detail
