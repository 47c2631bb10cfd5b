// RT_CUDNN_CHECK(call): runs a cuDNN call and throws ringtrain::Error (check.hpp's message) with
// cuDNN's status string and its last detailed message. Private: includes cudnn.h.
#pragma once
#include <cudnn.h>

#include <array>
#include <string>

#include "check/check.hpp"

namespace ringtrain::check {

// The status string is generic ("CUDNN_STATUS_BAD_PARAM"); cuDNN's last-error text says which
// argument it rejected. NOT_INITIALIZED is how cuDNN reports a missing GPU or driver.
inline void cudnn(cudnnStatus_t rc, const char* call, const char* file, int line) {
  if (rc == CUDNN_STATUS_SUCCESS) return;
  std::array<char, 512> detail{};
  cudnnGetLastErrorString(detail.data(), detail.size());
  std::string text = cudnnGetErrorString(rc);
  if (rc == CUDNN_STATUS_NOT_INITIALIZED) text += " (no usable CUDA device or driver?)";
  if (detail[0] != '\0') text += fmt::format(" ({})", detail.data());
  fail<Error>(call, file, line, text);
}

}  // namespace ringtrain::check

#define RT_CUDNN_CHECK(call) ::ringtrain::check::cudnn((call), #call, __FILE__, __LINE__)
