// CudaMemory: cudaMalloc/cudaFree/cudaMemGetInfo on the device current when it was made; each
// call switches to that device and back, so any thread may use it. cudaFree waits for the device.
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "ringtrain/tensor/memory_pool.hpp"

namespace ringtrain {
namespace {

// Makes `device` current for a scope and restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    RT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) RT_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

class CudaMemory final : public DeviceMemory {
 public:
  CudaMemory() { RT_CUDA_CHECK(cudaGetDevice(&device_)); }

  void* allocate(std::size_t bytes) override {
    DeviceScope scope(device_);
    void* ptr = nullptr;
    const cudaError_t rc = cudaMalloc(&ptr, bytes);
    if (rc == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it: out of memory is an answer here, not a failure
      return nullptr;
    }
    if (rc != cudaSuccess) cuda::throw_cuda_error(rc, "cudaMalloc", __FILE__, __LINE__);
    return ptr;
  }

  void release(void* ptr) override {
    DeviceScope scope(device_);
    RT_CUDA_CHECK(cudaFree(ptr));
  }

  MemoryInfo info() const override {
    DeviceScope scope(device_);
    MemoryInfo info;
    RT_CUDA_CHECK(cudaMemGetInfo(&info.free, &info.total));
    return info;
  }

  std::string name() const override { return fmt::format("cuda:{}", device_); }

 private:
  int device_ = 0;
};

}  // namespace

std::unique_ptr<DeviceMemory> make_cuda_memory() { return std::make_unique<CudaMemory>(); }

}  // namespace ringtrain
