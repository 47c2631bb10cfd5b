// DeviceBatch in a build without CUDA: says so clearly.
#include "ringtrain/core/error.hpp"
#include "train/device_batch.hpp"

namespace ringtrain {

std::unique_ptr<DeviceBatch> make_cuda_device_batch(std::int64_t, const Shape&, DType, const GpuAugment*) {
  throw NotCompiled("runtime.backend=cuda: this ringtrain was built without CUDA (RINGTRAIN_WITH_CUDA=OFF)");
}

}  // namespace ringtrain
