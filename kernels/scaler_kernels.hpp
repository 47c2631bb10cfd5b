// Host launcher for the loss-scale overflow check (scaler_kernels.cu): the flag a GradScaler
// reads back once per step. The stream is an opaque cudaStream_t.
#pragma once
#include <cstdint>

namespace ringtrain::kernels {

// Sets *flag = 1 when any of x[0..n) is Inf or NaN; never writes 0 (the caller zeroes flag
// with cudaMemsetAsync first), so several launches can share one flag. n == 0 launches nothing.
void launch_find_nonfinite(const float* x, std::int64_t n, std::int32_t* flag, void* stream);

}  // namespace ringtrain::kernels
