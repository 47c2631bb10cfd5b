// ComputeCopy and device-to-device copies shared by the CUDA layers.
#include <cuda_runtime.h>

#include "check/cuda_check.hpp"
#include "kernels/tensor_kernels.hpp"
#include "nn/cuda/cuda_layers.hpp"

namespace ringtrain::cuda {

void ComputeCopy::bind(const Tensor& master, DType act) {
  master_ = master;
  copy_ = act == DType::f32 ? Tensor() : Tensor::empty(master.shape(), act, Device::cuda);
  external_ = false;
}

void ComputeCopy::use(const Tensor& copy) {
  RT_REQUIRE(copy.numel() == master_.numel() && copy.device() == Device::cuda, Error,
             "ComputeCopy: a compute copy of {} elements for a parameter of {}", copy.numel(), master_.numel());
  copy_ = copy;
  external_ = true;
}

void* ComputeCopy::refresh(void* stream) {
  if (copy_.raw() != nullptr && !external_)
    kernels::launch_cast(master_.raw(), DType::f32, copy_.raw(), copy_.dtype(), master_.numel(), stream);
  return get();
}

const Tensor& scratch(Tensor& buffer, std::int64_t n, DType dtype) {
  if (buffer.numel() < n || buffer.dtype() != dtype) buffer = Tensor::empty(Shape{n}, dtype, Device::cuda);
  return buffer;
}

const void* as_f32(const Tensor& t, Tensor& buffer, void* stream) {
  if (t.dtype() == DType::f32) return t.raw();
  const Tensor& f = scratch(buffer, t.numel(), DType::f32);
  kernels::launch_cast(t.raw(), t.dtype(), f.raw(), DType::f32, t.numel(), stream);
  return f.raw();
}

void copy_on_device(void* dst, const void* src, std::size_t bytes, void* stream) {
  if (bytes == 0 || dst == src) return;
  RT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)));
}

void copy_rows_on_device(void* dst, std::int64_t dst_pitch, const void* src, std::int64_t src_pitch,
                         std::int64_t row_bytes, std::int64_t rows, void* stream) {
  if (rows == 0 || row_bytes == 0) return;
  RT_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<std::size_t>(dst_pitch), src, static_cast<std::size_t>(src_pitch),
                                  static_cast<std::size_t>(row_bytes), static_cast<std::size_t>(rows),
                                  cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)));
}

void pad_rows_on_device(void* dst, std::int64_t dst_pitch, const void* src, std::int64_t src_pitch, std::int64_t rows,
                        void* stream) {
  copy_rows_on_device(dst, dst_pitch, src, src_pitch, src_pitch, rows, stream);
  if (rows == 0 || dst_pitch == src_pitch) return;
  RT_CUDA_CHECK(cudaMemset2DAsync(static_cast<char*>(dst) + src_pitch, static_cast<std::size_t>(dst_pitch), 0,
                                  static_cast<std::size_t>(dst_pitch - src_pitch), static_cast<std::size_t>(rows),
                                  static_cast<cudaStream_t>(stream)));
}

}  // namespace ringtrain::cuda
