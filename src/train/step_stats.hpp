// Private: DeviceStepStats, a GPU step's statistics and decision kept on the device
// (src/cuda/step_stats.cpp), so that DataParallelStep queues the optimizer before the host waits
// for anything: the loss sums, the overflow check and the clipping norms are gathered into a
// device vector (ringtrain/train/step_decision.hpp's layout), summed over the ranks in place by
// the gradient communicator, turned by a kernel into the scale the optimizer reads (0: skip the
// step), and copied back to pinned host memory, where the host reads them once at the end.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "ringtrain/tensor/arena_range.hpp"

namespace ringtrain {

class StepLoss;

class DeviceStepStats {
 public:
  virtual ~DeviceStepStats() = default;
  // Queues on the compute stream: the (loss, correct) sums of the first `slots` slots of `loss`,
  // the loss divided by `rows` (per micro-batch); the non-finite check of grads[0, n) when
  // check_nonfinite; and, when `sums`, each shard's sum of squares over its ranges of grads.
  virtual void gather(const StepLoss& loss, std::int64_t slots, double rows, const float* grads, std::int64_t n,
                      bool check_nonfinite, bool sums) = 0;
  // The statistics vector in device memory (for the ranks' sum in place) and its length.
  virtual double* stats() = 0;
  virtual std::int64_t size() const = 0;
  // Queues decide_step on the (summed) statistics; returns the device f32 the optimizer scales
  // the summed gradients by, 0 when the step overflowed (Optimizer::step_scaled_on_device).
  virtual const float* decide(double world_k, double loss_scale, double clip) = 0;
  // Queues the statistics' copy to pinned host memory; read() waits for that copy and returns them.
  virtual void copy_to_host() = 0;
  virtual std::vector<double> read() = 0;
};

// Made by GpuBackend::make_step_stats: `shards` are the ranges of each rank's shard, whose sums of
// squares fill the vector's norm entries in rank order; a rank whose sums do not count (stage 0:
// every rank but 0, which holds the same reduced gradients) writes zeros there.

}  // namespace ringtrain
