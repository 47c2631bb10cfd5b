// gpu(): the compiled GPU backend, or the one error every GPU request gets without CUDA.
#include "cuda/gpu_backend.hpp"

#include "ringtrain/core/error.hpp"

namespace ringtrain {

const GpuBackend& gpu(std::string_view what) {
  const GpuBackend* backend = compiled_gpu_backend();
  if (backend == nullptr)
    throw NotCompiled(fmt::format("{}: this ringtrain was built without CUDA (RINGTRAIN_WITH_CUDA=OFF)", what));
  return *backend;
}

}  // namespace ringtrain
