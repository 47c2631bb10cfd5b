// RT_CUDA_CHECK(call): runs a CUDA runtime call and throws ringtrain::Error (check.hpp's
// message) with CUDA's error name and string; bind_thread_to_device. Private: includes cuda_runtime.h.
#pragma once
#include <cuda_runtime.h>

#include "check/check.hpp"

namespace ringtrain::check {

inline void cuda(cudaError_t rc, const char* call, const char* file, int line) {
  if (rc != cudaSuccess)
    fail<Error>(call, file, line, fmt::format("{}: {}", cudaGetErrorName(rc), cudaGetErrorString(rc)));
}

// Makes `device` (the rank's one GPU) current on the calling thread and leaves it so, on any
// thread that issues CUDA calls (the communication thread, a data thread). Never switches back:
// a helper thread's default device is 0, and making 0 current again would create a context on
// another rank's GPU (an error under EXCLUSIVE_PROCESS compute mode, memory on it otherwise).
inline void bind_thread_to_device(int device) {
  int current = -1;
  cuda(cudaGetDevice(&current), "cudaGetDevice", __FILE__, __LINE__);  // creates no context
  if (current != device) cuda(cudaSetDevice(device), "cudaSetDevice", __FILE__, __LINE__);
}

}  // namespace ringtrain::check

#define RT_CUDA_CHECK(call) ::ringtrain::check::cuda((call), #call, __FILE__, __LINE__)
