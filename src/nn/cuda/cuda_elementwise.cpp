// CUDA ReLU, GELU, Flatten (a device copy, where a Model does not pass it through as a view) and Dropout (the mask
// drawn on the device from the same key the CPU layer uses, read from device memory so a CUDA graph replay picks up the
// key begin_step stored for its step; kept as u8 flags for backward).
#include <cuda_runtime.h>

#include "check/cuda_check.hpp"
#include "kernels/activation_kernels.hpp"
#include "kernels/dropout_kernels.hpp"
#include "nn/cuda/cuda_layers.hpp"
#include "ringtrain/nn/dropout_rule.hpp"

namespace ringtrain::cuda {

template <>
void CudaReLU::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  kernels::launch_relu_forward(y.raw(), x.raw(), x.numel(), x.dtype(), compute_->stream);
}

template <>
void CudaReLU::backward(const Tensor&, const Tensor& y, const Tensor& dy, Tensor* dx) {
  if (dx != nullptr)
    kernels::launch_relu_backward(dx->raw(), y.raw(), dy.raw(), y.numel(), y.dtype(), compute_->stream);
}

template <>
void CudaGelu::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  kernels::launch_gelu_forward(y.raw(), x.raw(), x.numel(), x.dtype(), compute_->stream);
}

template <>
void CudaGelu::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  if (dx != nullptr)
    kernels::launch_gelu_backward(dx->raw(), x.raw(), dy.raw(), x.numel(), x.dtype(), compute_->stream);
}

template <>
void CudaFlatten::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  copy_on_device(y.raw(), x.raw(), x.nbytes(), compute_->stream);
}

template <>
void CudaFlatten::backward(const Tensor&, const Tensor&, const Tensor& dy, Tensor* dx) {
  if (dx != nullptr) copy_on_device(dx->raw(), dy.raw(), dy.nbytes(), compute_->stream);
}

CudaDropout::CudaDropout(ComputePtr compute, double p, int layer_index)
    : Dropout(p, layer_index),
      compute_(std::move(compute)),
      key_(Tensor::empty(Shape{sizeof(std::uint64_t)}, DType::u8, Device::cuda)) {}

void CudaDropout::begin_step(const StepInfo& info) {
  if (p_ > 0.0f) store_key(info);
}

void CudaDropout::store_key(const StepInfo& info) {
  const std::uint64_t key = dropout_key(info.seed, info.step, info.rank, layer_index_, info.micro_batch);
  if (key_stored_ && key == stored_key_) return;
  // Captured, the store would bake this step's key into every replay: fail the capture instead
  // (the step then runs eagerly). begin_step, outside the graph, keeps this from happening.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  RT_CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(compute_->stream), &capturing));
  RT_REQUIRE(capturing == cudaStreamCaptureStatusNone, Error,
             "dropout: the mask key of step {} was not stored before the step was captured (Model::begin_step)",
             info.step);
  kernels::launch_store_key(reinterpret_cast<std::uint64_t*>(key_.raw()), key, compute_->stream);
  stored_key_ = key;
  key_stored_ = true;
}

void CudaDropout::forward(const Tensor& x, Tensor& y, const StepInfo& info) {
  const std::int64_t n = x.numel();
  masked_ = info.training && p_ > 0.0f;
  if (!masked_) {
    copy_on_device(y.raw(), x.raw(), x.nbytes(), compute_->stream);
    return;
  }
  if (mask_.numel() < n) mask_ = Tensor::empty(Shape{n}, DType::u8, Device::cuda);
  store_key(info);
  kernels::launch_dropout_forward(x.raw(), y.raw(), mask_.data<std::uint8_t>(), n, p_,
                                  reinterpret_cast<const std::uint64_t*>(key_.raw()), x.dtype(), compute_->stream);
}

void CudaDropout::backward(const Tensor&, const Tensor&, const Tensor& dy, Tensor* dx) {
  if (dx == nullptr) return;
  if (!masked_) {
    copy_on_device(dx->raw(), dy.raw(), dy.nbytes(), compute_->stream);
    return;
  }
  kernels::launch_dropout_backward(dy.raw(), mask_.data<std::uint8_t>(), dx->raw(), dy.numel(), p_, dy.dtype(),
                                   compute_->stream);
}

}  // namespace ringtrain::cuda
