// RT_CUBLAS_CHECK(call): runs a cuBLAS or cuBLASLt call and throws ringtrain::Error (check.hpp's
// message) with the status name and string. Private: includes cublasLt.h (link CUDA::cublasLt).
#pragma once
#include <cublasLt.h>

#include "check/check.hpp"

namespace ringtrain::check {

// NOT_INITIALIZED is how cuBLAS reports a missing GPU or driver, so the message says so.
inline void cublas(cublasStatus_t rc, const char* call, const char* file, int line) {
  if (rc == CUBLAS_STATUS_SUCCESS) return;
  const char* hint = rc == CUBLAS_STATUS_NOT_INITIALIZED ? " (no usable CUDA device or driver?)" : "";
  fail<Error>(call, file, line, fmt::format("{}: {}{}", cublasLtGetStatusName(rc), cublasLtGetStatusString(rc), hint));
}

}  // namespace ringtrain::check

#define RT_CUBLAS_CHECK(call) ::ringtrain::check::cublas((call), #call, __FILE__, __LINE__)
