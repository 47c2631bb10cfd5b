// make_cuda_memory in a build without CUDA: says so clearly.
#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/memory_pool.hpp"

namespace ringtrain {

std::unique_ptr<DeviceMemory> make_cuda_memory() {
  throw NotCompiled("CUDA device memory: this ringtrain was built without CUDA (RINGTRAIN_WITH_CUDA=OFF)");
}

}  // namespace ringtrain
