// CudaMaxPool2d: cuDNN max pooling (descriptors made once per batch size). With bf16 it pools
// f32 copies and casts the result back: exact, since the max of bf16 values is one of them.
#include "kernels/tensor_kernels.hpp"
#include "nn/cuda/cuda_layers.hpp"

namespace ringtrain::cuda {

CudaMaxPool2d::CudaMaxPool2d(ComputePtr compute, std::int64_t kernel, std::int64_t stride)
    : MaxPool2d(kernel, stride), compute_(std::move(compute)), staged_(compute_->act == DType::bf16) {}

MaxPoolOp& CudaMaxPool2d::op_for(std::int64_t batch) {
  return op_.get(batch, [this](std::int64_t n) {
    return std::make_unique<MaxPoolOp>(compute_->dnn, n, c_, h_, w_, k_, s_, staged_ ? DType::f32 : compute_->act);
  });
}

void CudaMaxPool2d::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  MaxPoolOp& op = op_for(x.shape()[0]);
  if (!staged_) return op.forward(x.raw(), y.raw(), compute_->stream);
  void* out = scratch(y_f32_, y.numel(), DType::f32).raw();
  op.forward(as_f32(x, x_f32_, compute_->stream), out, compute_->stream);
  kernels::launch_cast(out, DType::f32, y.raw(), y.dtype(), y.numel(), compute_->stream);
}

void CudaMaxPool2d::backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) {
  if (dx == nullptr) return;
  MaxPoolOp& op = op_for(x.shape()[0]);
  if (!staged_) return op.backward(x.raw(), y.raw(), dy.raw(), dx->raw(), compute_->stream);
  void* out = scratch(dx_f32_, dx->numel(), DType::f32).raw();
  op.backward(as_f32(x, x_f32_, compute_->stream), as_f32(y, y_f32_, compute_->stream),
              as_f32(dy, dy_f32_, compute_->stream), out, compute_->stream);
  kernels::launch_cast(out, DType::f32, dx->raw(), dx->dtype(), dx->numel(), compute_->stream);
}

}  // namespace ringtrain::cuda
