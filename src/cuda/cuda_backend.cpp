// The CUDA build's GPU backend: the one CudaBackend, and its layer maker (the CUDA layers of
// src/nn/cuda).
#include "cuda/cuda_backend.hpp"

#include "nn/layer_maker.hpp"

namespace ringtrain {

std::unique_ptr<LayerMaker> cuda::CudaBackend::make_layer_maker(DType precision, bool tf32) const {
  return make_cuda_layer_maker(precision, tf32);
}

const GpuBackend* compiled_gpu_backend() {
  static const cuda::CudaBackend backend;
  return &backend;
}

}  // namespace ringtrain
