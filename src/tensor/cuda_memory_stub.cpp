// CUDA device memory in a build without CUDA: every entry point says so clearly.
#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/device_memory.hpp"
#include "ringtrain/tensor/memory_pool.hpp"

namespace ringtrain {

namespace {
[[noreturn]] void not_compiled() {
  throw NotCompiled("CUDA device memory: this ringtrain was built without CUDA (RINGTRAIN_WITH_CUDA=OFF)");
}
}  // namespace

std::unique_ptr<DeviceMemory> make_cuda_memory() { not_compiled(); }
MemoryPool& cuda_pool() { not_compiled(); }
std::shared_ptr<void> allocate_cuda_zeroed(std::size_t) { not_compiled(); }
void copy_cuda_bytes(void*, bool, const void*, bool, std::size_t) { not_compiled(); }

}  // namespace ringtrain
