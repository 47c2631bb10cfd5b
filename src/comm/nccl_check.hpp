// RT_NCCL_CHECK(call): runs an NCCL call and throws CommError naming the call, file and line
// with NCCL's error string and its last detailed message. RT_NCCL_CHECK_ASYNC also accepts
// ncclInProgress, which every call on a non-blocking communicator may return.
#pragma once
#include <nccl.h>

#include <string>

#include "ringtrain/core/error.hpp"

namespace ringtrain::nccl {

// NCCL's result string is generic ("unhandled cuda error"); the last-error text says which
// call inside NCCL failed and why, so both go into the message.
inline std::string describe_nccl_error(ncclResult_t code) {
  const char* detail = ncclGetLastError(nullptr);  // the comm argument is unused by NCCL
  std::string text = ncclGetErrorString(code);
  if (detail != nullptr && *detail != '\0') text += fmt::format(" ({})", detail);
  return text;
}

[[noreturn]] inline void throw_nccl_error(ncclResult_t code, const char* call, const char* file, int line) {
  throw CommError(fmt::format("{} failed ({}:{}): {}", call, file, line, describe_nccl_error(code)));
}

}  // namespace ringtrain::nccl

#define RT_NCCL_CHECK(call)                                                                                      \
  do {                                                                                                           \
    const ncclResult_t rt_nccl_rc_ = (call);                                                                     \
    if (rt_nccl_rc_ != ncclSuccess) ::ringtrain::nccl::throw_nccl_error(rt_nccl_rc_, #call, __FILE__, __LINE__); \
  } while (0)

#define RT_NCCL_CHECK_ASYNC(call)                                                  \
  do {                                                                             \
    const ncclResult_t rt_nccl_rc_ = (call);                                       \
    if (rt_nccl_rc_ != ncclSuccess && rt_nccl_rc_ != ncclInProgress)               \
      ::ringtrain::nccl::throw_nccl_error(rt_nccl_rc_, #call, __FILE__, __LINE__); \
  } while (0)
