// `ringtrain doctor` versions in a CUDA build. Without a driver the runtime version is still
// known (it is compiled in) while device queries fail with cudaErrorInsufficientDriver: that
// is a state to report, not an error. (A CUDA build always has cuDNN: src/nn/cuda needs it.)
#include <cublas_api.h>
#include <cuda_runtime.h>
#include <library_types.h>
#include <cudnn.h>

#include <fmt/format.h>

#include "cli/cuda_versions.hpp"
#include "cuda/cuda_backend.hpp"
#include "nn/cuda/cudnn_attention.hpp"

namespace ringtrain {

CudaVersions cuda::CudaBackend::versions() const {
  CudaVersions v;
  v.compiled = true;
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess) v.runtime = 0;
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    v.cublas = 10000 * major + 100 * minor + patch;
  v.cudnn = static_cast<int>(cudnnGetVersion());
  v.cudnn_cudart = static_cast<int>(cudnnGetCudartVersion());
  v.cudnn_frontend = cuda::CudnnAttention::frontend_version();
  return v;
}

std::vector<VisibleGpu> cuda::CudaBackend::visible_gpus(std::string* why) const {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc == cudaErrorInsufficientDriver) {
    int driver = 0;
    *why = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0
               ? fmt::format("the NVIDIA driver (CUDA {}.{}) is older than this CUDA runtime", driver / 1000,
                             driver % 1000 / 10)
               : std::string("no NVIDIA driver");
    return {};
  }
  if (rc == cudaErrorNoDevice || (rc == cudaSuccess && count == 0)) {
    *why = "no CUDA device visible (CUDA_VISIBLE_DEVICES?)";
    return {};
  }
  if (rc != cudaSuccess) {
    *why = fmt::format("cudaGetDeviceCount failed: {}", cudaGetErrorString(rc));
    return {};
  }
  std::vector<VisibleGpu> gpus;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    if (const cudaError_t e = cudaGetDeviceProperties(&p, d); e != cudaSuccess) {
      *why = fmt::format("cudaGetDeviceProperties({}) failed: {}", d, cudaGetErrorString(e));
      return {};
    }
    gpus.push_back(VisibleGpu{d, p.name, static_cast<std::uint64_t>(p.totalGlobalMem), p.major, p.minor,
                              fmt::format("{:04x}:{:02x}:{:02x}.0", p.pciDomainID, p.pciBusID, p.pciDeviceID)});
  }
  return gpus;
}

}  // namespace ringtrain
