// CUDA device memory: CudaMemory (cudaMalloc/cudaFree/cudaMemGetInfo on the device current when
// it was made; each call binds the calling thread to that device, the rank's, so any thread may
// use it; its events are CUDA events without timing), the process's caching pool over it, and
// host/device copies.
#include <cuda_runtime.h>

#include "check/cuda_check.hpp"
#include "cuda/cuda_backend.hpp"
#include "ringtrain/tensor/memory_pool.hpp"

namespace ringtrain {
namespace {

// A pool's stream handle as the CUDA stream it names (the pool keeps it as an opaque pointer).
cudaStream_t cuda_stream(StreamHandle stream) { return static_cast<cudaStream_t>(const_cast<void*>(stream)); }

class CudaMemory final : public DeviceMemory {
 public:
  CudaMemory() { RT_CUDA_CHECK(cudaGetDevice(&device_)); }

  void* allocate(std::size_t bytes) override {
    check::bind_thread_to_device(device_);
    void* ptr = nullptr;
    const cudaError_t rc = cudaMalloc(&ptr, bytes);
    if (rc == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it: out of memory is an answer here, not a failure
      return nullptr;
    }
    if (rc != cudaSuccess) check::cuda(rc, "cudaMalloc", __FILE__, __LINE__);
    return ptr;
  }

  void release(void* ptr) override {
    check::bind_thread_to_device(device_);
    RT_CUDA_CHECK(cudaFree(ptr));
  }

  MemoryInfo info() const override {
    check::bind_thread_to_device(device_);
    MemoryInfo info;
    RT_CUDA_CHECK(cudaMemGetInfo(&info.free, &info.total));
    return info;
  }

  std::string name() const override { return fmt::format("cuda:{}", device_); }

  StreamEvent record_event(StreamHandle stream) override {
    check::bind_thread_to_device(device_);
    cudaEvent_t event = nullptr;
    RT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    const cudaError_t rc = cudaEventRecord(event, cuda_stream(stream));
    if (rc != cudaSuccess) {
      cudaEventDestroy(event);
      check::cuda(rc, "cudaEventRecord", __FILE__, __LINE__);
    }
    return event;
  }

  bool event_done(StreamEvent event) override {
    const cudaError_t rc = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (rc == cudaErrorNotReady) return false;
    if (rc != cudaSuccess) check::cuda(rc, "cudaEventQuery", __FILE__, __LINE__);
    return true;
  }

  void wait_event(StreamEvent event) override { RT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }

  void destroy_event(StreamEvent event) override { RT_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event))); }

 private:
  int device_ = 0;
};

}  // namespace

std::unique_ptr<DeviceMemory> cuda::CudaBackend::make_memory() const { return std::make_unique<CudaMemory>(); }

MemoryPool& cuda::CudaBackend::pool() const {
  // Deliberately never destroyed (see the header): the source and pool outlive every tensor.
  static MemoryPool* const pool = new MemoryPool(*make_memory().release());
  return *pool;
}

std::shared_ptr<void> cuda::CudaBackend::allocate_zeroed(std::size_t bytes) const {
  MemoryPool& memory = pool();
  void* ptr = memory.allocate(bytes);
  std::shared_ptr<void> owner(ptr, [&memory](void* p) { memory.free(p); });
  RT_CUDA_CHECK(cudaMemset(ptr, 0, bytes));
  return owner;
}

void cuda::CudaBackend::copy_bytes(void* dst, bool dst_on_device, const void* src, bool src_on_device,
                                   std::size_t bytes) const {
  const cudaMemcpyKind kind = dst_on_device ? (src_on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                            : (src_on_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  RT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
}

void cuda::CudaBackend::copy(void* dst, const void* src, std::size_t bytes) const {
  copy_bytes(dst, true, src, true, bytes);
}

}  // namespace ringtrain
