// Host launchers for the checks on the reduced gradients (scaler_kernels.cu): the overflow flag
// a GradScaler reads back once per step, and the squared norm gradient clipping needs. The stream is an opaque
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

}  // namespace ringtrain::kernels
