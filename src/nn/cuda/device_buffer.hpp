// DeviceBuffer: raw device memory owned for an object's lifetime (library workspaces), made
// once outside the step loop. Running out of device memory throws OutOfMemory. SharedWorkspace:
// one growing workspace for everything that runs one at a time on a stream.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "check/cuda_check.hpp"

namespace ringtrain::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    const cudaError_t rc = cudaMalloc(&ptr_, bytes);
    if (rc == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it so later calls do not see it
      throw OutOfMemory(fmt::format("cudaMalloc({} bytes) for a library workspace: out of device memory", bytes));
    }
    if (rc != cudaSuccess) check::cuda(rc, "cudaMalloc", __FILE__, __LINE__);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }

  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Scratch shared by the ops of one model (cuDNN's convolutions, attention's per-head matrices):
// they run one at a time on the model's stream, so one buffer serves them all, sized for the
// largest request (at least doubling when it grows). A buffer it outgrew stays allocated while
// the workspace lives, so a CUDA graph captured before a growth replays with valid memory.
class SharedWorkspace {
 public:
  // At least `bytes` of device memory, valid until the workspace is destroyed.
  void* get(std::size_t bytes) {
    const std::size_t have = buffers_.empty() ? 0 : buffers_.back().bytes();
    if (bytes > have) buffers_.emplace_back(std::max(bytes, 2 * have));
    return buffers_.empty() ? nullptr : buffers_.back().get();
  }
  std::size_t bytes() const { return buffers_.empty() ? 0 : buffers_.back().bytes(); }

 private:
  std::vector<DeviceBuffer> buffers_;  // the last one is current
};

}  // namespace ringtrain::cuda
