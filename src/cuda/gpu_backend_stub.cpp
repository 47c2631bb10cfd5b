// A build without CUDA: there is no GPU backend (gpu() says so, naming what was asked for).
#include "cuda/gpu_backend.hpp"

namespace ringtrain {

const GpuBackend* compiled_gpu_backend() { return nullptr; }

}  // namespace ringtrain
