// RT_NCCL_CHECK(call): runs an NCCL call and throws CommError (check.hpp's message) with NCCL's
// error string and its last detailed message. RT_NCCL_CHECK_ASYNC also accepts ncclInProgress,
// which every call on a non-blocking communicator may return.
#pragma once
#include <nccl.h>

#include <string>

#include "check/check.hpp"

namespace ringtrain::check {

// NCCL's result string is generic ("unhandled cuda error"); the last-error text says which
// call inside NCCL failed and why, so both go into the message.
inline std::string describe_nccl_error(ncclResult_t rc) {
  const char* detail = ncclGetLastError(nullptr);  // the comm argument is unused by NCCL
  std::string text = ncclGetErrorString(rc);
  if (detail != nullptr && *detail != '\0') text += fmt::format(" ({})", detail);
  return text;
}

inline void nccl(ncclResult_t rc, const char* call, const char* file, int line, bool in_progress_ok = false) {
  if (rc == ncclSuccess || (in_progress_ok && rc == ncclInProgress)) return;
  fail<CommError>(call, file, line, describe_nccl_error(rc));
}

}  // namespace ringtrain::check

#define RT_NCCL_CHECK(call) ::ringtrain::check::nccl((call), #call, __FILE__, __LINE__)
#define RT_NCCL_CHECK_ASYNC(call) ::ringtrain::check::nccl((call), #call, __FILE__, __LINE__, true)
