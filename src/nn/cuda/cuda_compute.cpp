// ComputeCopy and device-to-device copies shared by the CUDA layers.
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "kernels/tensor_kernels.hpp"
#include "nn/cuda/cuda_layers.hpp"

namespace ringtrain::cuda {

void ComputeCopy::bind(const Tensor& master, DType act) {
  master_ = master;
  copy_ = act == DType::f32 ? Tensor() : Tensor::empty(master.shape(), act, Device::cuda);
}

const void* ComputeCopy::refresh(void* stream) {
  if (copy_.raw() != nullptr)
    kernels::launch_cast(master_.raw(), DType::f32, copy_.raw(), copy_.dtype(), master_.numel(), stream);
  return get();
}

void copy_on_device(void* dst, const void* src, std::size_t bytes, void* stream) {
  if (bytes == 0 || dst == src) return;
  RT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)));
}

}  // namespace ringtrain::cuda
