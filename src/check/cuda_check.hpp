// RT_CUDA_CHECK(call): runs a CUDA runtime call and throws ringtrain::Error (check.hpp's
// message) with CUDA's error name and string. Private: includes cuda_runtime.h.
#pragma once
#include <cuda_runtime.h>

#include "check/check.hpp"

namespace ringtrain::check {

inline void cuda(cudaError_t rc, const char* call, const char* file, int line) {
  if (rc != cudaSuccess)
    fail<Error>(call, file, line, fmt::format("{}: {}", cudaGetErrorName(rc), cudaGetErrorString(rc)));
}

}  // namespace ringtrain::check

#define RT_CUDA_CHECK(call) ::ringtrain::check::cuda((call), #call, __FILE__, __LINE__)
