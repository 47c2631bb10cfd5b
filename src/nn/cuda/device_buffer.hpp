// DeviceBuffer: raw device memory owned for an object's lifetime (library workspaces), made
// once outside the step loop. Running out of device memory throws OutOfMemory.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

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

}  // namespace ringtrain::cuda
