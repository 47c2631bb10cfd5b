// The decision a data-parallel step takes after backward, from its statistics summed over the
// ranks: the loss, whether the loss or the gradients overflowed (fp16 skips the step), the
// averaged gradients' global norm and the scale the optimizer applies to the summed gradients
// (the average over ranks and micro-batches, the loss scale undone, the clipping). Shared by the
// host (DataParallelStep) and the device (kernels/step_kernels.cu), so that a GPU step queued
// without waiting decides as the host does from the same numbers. Host-only header
// (RT_HOST_DEVICE as in update_rules.hpp).
#pragma once
#include <cmath>

#include "ringtrain/optim/update_rules.hpp"

namespace ringtrain {

// The statistics vector: [0] the ranks' per-sample mean losses summed over their micro-batches,
// [1] correct predictions, [2] ranks that found a non-finite gradient, then at [3 + q] the sum of
// squares of shard q's reduced gradients (summed by one rank only).
inline constexpr int kStepStatsHeader = 3;

struct StepDecision {
  double loss = 0.0;          // mean over ranks and micro-batches
  bool overflow = false;      // non-finite loss or gradients: the optimizer must not step
  double grad_norm = 0.0;     // the averaged gradients' L2 norm (clipping only; 0 otherwise)
  double update_scale = 1.0;  // what the optimizer multiplies the summed gradients by
};

// stats: kStepStatsHeader + shards values; world_k: ranks x micro-batches; loss_scale: the one
// the step ran with; clip: optim.clip_grad_norm (0: none).
RT_HOST_DEVICE inline StepDecision decide_step(const double* stats, int shards, double world_k, double loss_scale,
                                               double clip) {
  StepDecision d;
  d.loss = stats[0] / world_k;
  d.overflow = !std::isfinite(d.loss) || stats[2] > 0.0;
  d.update_scale = 1.0 / (world_k * loss_scale);
  if (clip > 0.0) {
    double sum = 0.0;
    for (int q = 0; q < shards; ++q) sum += stats[kStepStatsHeader + q];
    d.grad_norm = std::sqrt(sum) * d.update_scale;
    if (d.grad_norm > clip) d.update_scale *= clip / d.grad_norm;
  }
  return d;
}

}  // namespace ringtrain
