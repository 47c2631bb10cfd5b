// CUDA device binding in a build without CUDA: every call says so clearly.
#include "ringtrain/core/error.hpp"
#include "runtime/cuda_device.hpp"

namespace ringtrain::cuda {

int device_count() {
  throw NotCompiled("runtime.backend=cuda: this ringtrain was built without CUDA (RINGTRAIN_WITH_CUDA=OFF)");
}
void set_device(int) { device_count(); }

}  // namespace ringtrain::cuda
