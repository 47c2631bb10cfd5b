// Host launchers for the checks on the reduced gradients (scaler_kernels.cu): the overflow flag,
// the squared norms gradient clipping needs, and a step's statistics and decision
// (ringtrain/train/step_decision.hpp) assembled on the device. The stream is an opaque
// cudaStream_t.
#pragma once
#include <cstdint>

namespace ringtrain::kernels {

// Sets *flag = 1 when any of x[0..n) is Inf or NaN; never writes 0 (the caller zeroes flag
// with cudaMemsetAsync first), so several launches can share one flag. n == 0 launches nothing.
void launch_find_nonfinite(const float* x, std::int64_t n, std::int32_t* flag, void* stream);
// *out = sum of x[i]^2 in double, deterministic (fixed blocks, then one block over their sums);
// partials: kSumSquaresBlocks doubles of scratch.
constexpr int kSumSquaresBlocks = 1024;
void launch_sum_squares(const float* x, std::int64_t n, double* partials, double* out, void* stream);

// A step's statistics vector (kStepStatsHeader + shards doubles) from device values, one thread,
// the host's order of additions: [0] the loss sums of `slots` (loss, correct) pairs added in
// order, divided by rows; [1] their correct counts; [2] 1 when *nonfinite_flag is set; [3 + q]
// shard q's sum of its ranges' sums of squares (range_sums, shard_ranges[q] of them per shard,
// in order), or 0 for every shard when !with_sums.
void launch_step_stats(const double* loss_slots, std::int64_t slots, double rows, const std::int32_t* nonfinite_flag,
                       const double* range_sums, const std::int32_t* shard_ranges, int shards, bool with_sums,
                       double* stats, void* stream);
// *update_scale = decide_step(stats, ...).update_scale as f32, or 0 when the step overflowed
// (the optimizer then skips it).
void launch_decide_step(const double* stats, int shards, double world_k, double loss_scale, double clip,
                        float* update_scale, void* stream);

}  // namespace ringtrain::kernels
