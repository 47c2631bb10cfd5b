// RT_CUDNN_CHECK(call): runs a cuDNN call and throws ringtrain::Error naming the call, file and
// line with cuDNN's status string and its last detailed message. Private: includes cudnn.h.
#pragma once
#include <cudnn.h>

#include <array>
#include <string>

#include "ringtrain/core/error.hpp"

namespace ringtrain::cuda {

// The status string is generic ("CUDNN_STATUS_BAD_PARAM"); cuDNN's last-error text says which
// argument it rejected. NOT_INITIALIZED is how cuDNN reports a missing GPU or driver.
[[noreturn]] inline void throw_cudnn_error(cudnnStatus_t code, const char* call, const char* file, int line) {
  std::array<char, 512> detail{};
  cudnnGetLastErrorString(detail.data(), detail.size());
  std::string text = cudnnGetErrorString(code);
  if (code == CUDNN_STATUS_NOT_INITIALIZED) text += " (no usable CUDA device or driver?)";
  if (detail[0] != '\0') text += fmt::format(" ({})", detail.data());
  throw Error(fmt::format("{} failed ({}:{}): {}", call, file, line, text));
}

}  // namespace ringtrain::cuda

#define RT_CUDNN_CHECK(call)                                                         \
  do {                                                                               \
    const cudnnStatus_t rt_cudnn_rc_ = (call);                                       \
    if (rt_cudnn_rc_ != CUDNN_STATUS_SUCCESS)                                        \
      ::ringtrain::cuda::throw_cudnn_error(rt_cudnn_rc_, #call, __FILE__, __LINE__); \
  } while (0)
