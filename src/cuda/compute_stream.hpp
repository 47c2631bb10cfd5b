// The rank's CUDA compute stream: every kernel, GEMM and cuDNN call of the training step is
// queued on it, so the step can be captured in a CUDA graph (the legacy default stream cannot
// be). It is a blocking stream: work on the legacy default stream (synchronous copies, NCCL's
// input event) still waits for it, and it for that work. Private: includes cuda_runtime.h.
#pragma once
#include <cuda_runtime.h>

namespace ringtrain::cuda {

// Created on first use on the current device (the rank's bound GPU); lives until exit.
cudaStream_t compute_stream();

// The process's host-to-device copy stream (DeviceBatch uploads): non-blocking, so copies overlap
// the compute stream, ordered with it by events. Created on first use, never destroyed: the pool
// records events on it when buffers it wrote are freed, which may happen after their user is gone.
cudaStream_t copy_stream();

}  // namespace ringtrain::cuda
