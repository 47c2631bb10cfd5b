// RT_CUBLAS_CHECK(call): runs a cuBLAS or cuBLASLt call and throws ringtrain::Error naming the
// call, file and line with the status name and string. Private: includes cublasLt.h (link CUDA::cublasLt).
#pragma once
#include <cublasLt.h>

#include "ringtrain/core/error.hpp"

namespace ringtrain::cuda {

// NOT_INITIALIZED is how cuBLAS reports a missing GPU or driver, so the message says so.
[[noreturn]] inline void throw_cublas_error(cublasStatus_t code, const char* call, const char* file, int line) {
  const char* hint = code == CUBLAS_STATUS_NOT_INITIALIZED ? " (no usable CUDA device or driver?)" : "";
  throw Error(fmt::format("{} failed ({}:{}): {}: {}{}", call, file, line, cublasLtGetStatusName(code),
                          cublasLtGetStatusString(code), hint));
}

}  // namespace ringtrain::cuda

#define RT_CUBLAS_CHECK(call)                                                          \
  do {                                                                                 \
    const cublasStatus_t rt_cublas_rc_ = (call);                                       \
    if (rt_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                        \
      ::ringtrain::cuda::throw_cublas_error(rt_cublas_rc_, #call, __FILE__, __LINE__); \
  } while (0)
