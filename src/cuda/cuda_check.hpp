// RT_CUDA_CHECK(call): runs a CUDA runtime call and throws ringtrain::Error naming the call,
// file and line with CUDA's error name and string. Private: includes cuda_runtime.h.
#pragma once
#include <cuda_runtime.h>

#include "ringtrain/core/error.hpp"

namespace ringtrain::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  throw Error(
      fmt::format("{} failed ({}:{}): {}: {}", call, file, line, cudaGetErrorName(code), cudaGetErrorString(code)));
}

}  // namespace ringtrain::cuda

#define RT_CUDA_CHECK(call)                                                                                      \
  do {                                                                                                           \
    const cudaError_t rt_cuda_rc_ = (call);                                                                      \
    if (rt_cuda_rc_ != cudaSuccess) ::ringtrain::cuda::throw_cuda_error(rt_cuda_rc_, #call, __FILE__, __LINE__); \
  } while (0)
