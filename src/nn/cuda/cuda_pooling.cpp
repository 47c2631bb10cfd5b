// CudaMaxPool2d: cuDNN max pooling (descriptors made once per batch size).
#include "nn/cuda/cuda_layers.hpp"

namespace ringtrain::cuda {

CudaMaxPool2d::CudaMaxPool2d(ComputePtr compute, std::int64_t kernel, std::int64_t stride)
    : MaxPool2d(kernel, stride), compute_(std::move(compute)) {}

MaxPoolOp& CudaMaxPool2d::op_for(std::int64_t batch) {
  return op_.get(batch, [this](std::int64_t n) {
    return std::make_unique<MaxPoolOp>(compute_->dnn, n, c_, h_, w_, k_, s_, compute_->act);
  });
}

void CudaMaxPool2d::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  op_for(x.shape()[0]).forward(x.raw(), y.raw(), compute_->stream);
}

void CudaMaxPool2d::backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) {
  if (dx != nullptr) op_for(x.shape()[0]).backward(x.raw(), y.raw(), dy.raw(), dx->raw(), compute_->stream);
}

}  // namespace ringtrain::cuda
