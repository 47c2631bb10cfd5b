// CUDA device binding: counts visible GPUs (no driver or no GPU counts as zero, so login
// nodes get a clear "no CUDA device" error) and selects one.
#include <cuda_runtime.h>

#include "ringtrain/core/error.hpp"
#include "cuda/cuda_backend.hpp"

namespace ringtrain::cuda {

int CudaBackend::device_count() const {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver) return 0;
  if (rc != cudaSuccess) throw Error(fmt::format("cudaGetDeviceCount failed: {}", cudaGetErrorString(rc)));
  return n;
}

void CudaBackend::set_device(int device) const {
  const cudaError_t rc = cudaSetDevice(device);
  if (rc != cudaSuccess) throw Error(fmt::format("cudaSetDevice({}) failed: {}", device, cudaGetErrorString(rc)));
}

}  // namespace ringtrain::cuda
