// `ringtrain doctor` in a build without CUDA: no versions, no GPUs, and a reason that says so.
#include "cli/cuda_versions.hpp"

namespace ringtrain {

CudaVersions cuda_versions() { return CudaVersions{}; }

std::vector<VisibleGpu> visible_gpus(std::string* why) {
  *why = "CUDA not compiled (RINGTRAIN_WITH_CUDA=OFF)";
  return {};
}

}  // namespace ringtrain
