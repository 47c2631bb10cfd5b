// Private to `ringtrain doctor`: versions of the CUDA runtime, driver, cuBLAS, cuDNN and cudnn-frontend, and
// the GPUs this process sees, as GpuBackend::versions and visible_gpus (src/cuda/versions.cpp)
// report them; a build without CUDA reports them as not compiled. Never throws for a missing GPU
// or driver.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ringtrain {

struct CudaVersions {
  bool compiled = false;       // false: RINGTRAIN_WITH_CUDA=OFF, every other field is empty
  int runtime = 0;             // cudaRuntimeGetVersion: 1000 x major + 10 x minor (13000 = 13.0)
  int driver = 0;              // newest CUDA the driver supports, same encoding; 0: no NVIDIA driver
  int cublas = 0;              // 10000 x major + 100 x minor + patch
  int cudnn = -1;              // cudnnGetVersion (91900 = 9.19.0); -1: cuDNN not found at build time
  int cudnn_cudart = 0;        // the CUDA runtime cuDNN was built for (cudnnGetCudartVersion)
  std::string cudnn_frontend;  // the cudnn-frontend of the fused attention ("1.23.0"); empty: built without
};

struct VisibleGpu {
  int ordinal = 0;
  std::string name;
  std::uint64_t memory_bytes = 0;
  int cc_major = 0, cc_minor = 0;  // compute capability
  std::string pci_bus_id;          // "0000:18:00.0": tells GPUs apart across ranks of a node
};

// visible_gpus: the GPUs this process sees; empty with *why set when there are none ("no NVIDIA
// driver", "no CUDA device").

}  // namespace ringtrain
