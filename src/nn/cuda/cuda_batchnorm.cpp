// CudaBatchNorm2d: cuDNN spatial batch norm. The running statistics live on the device (the
// trainer averages them over ranks and checkpoints them through host copies); batch
// statistics of a training forward are kept for backward. cuDNN's batch norm takes no bf16
// activations, so with bf16 the layer casts to f32 scratch buffers and back.
#include "kernels/tensor_kernels.hpp"
#include "nn/cuda/cuda_layers.hpp"

namespace ringtrain::cuda {

CudaBatchNorm2d::CudaBatchNorm2d(ComputePtr compute, double momentum, double eps)
    : BatchNorm2d(momentum, eps), compute_(std::move(compute)), staged_(compute_->act == DType::bf16) {}

Shape CudaBatchNorm2d::configure(const Shape& input) {
  Shape out = BatchNorm2d::configure(input);  // not const: returned, so moved
  // The CPU layer initialised host buffers; move them to the device.
  for (Tensor* t : {&running_mean_, &running_var_}) {
    Tensor device = Tensor::empty(t->shape(), DType::f32, Device::cuda);
    copy_into(device, *t);
    *t = device;
  }
  save_mean_ = Tensor::empty(Shape{c_}, DType::f32, Device::cuda);
  save_inv_std_ = Tensor::empty(Shape{c_}, DType::f32, Device::cuda);
  return out;
}

BatchNormOp& CudaBatchNorm2d::op_for(std::int64_t batch) {
  // Spatial batch norm depends on H*W only, so the plane is described as [H*W, 1].
  return op_.get(batch, [this](std::int64_t n) {
    return std::make_unique<BatchNormOp>(compute_->dnn, n, c_, hw_, 1, staged_ ? DType::f32 : compute_->act, eps_,
                                         momentum_);
  });
}

void CudaBatchNorm2d::forward(const Tensor& x, Tensor& y, const StepInfo& info) {
  BatchNormOp& op = op_for(x.shape()[0]);
  const void* in = staged_ ? as_f32(x, x_f32_, compute_->stream) : x.raw();
  void* out = staged_ ? scratch(y_f32_, y.numel(), DType::f32).raw() : y.raw();
  if (info.training) {
    op.forward_training(in, out, gamma_.f32(), beta_.f32(), running_mean_.f32(), running_var_.f32(), save_mean_.f32(),
                        save_inv_std_.f32(), compute_->stream);
  } else {
    op.forward_inference(in, out, gamma_.f32(), beta_.f32(), running_mean_.f32(), running_var_.f32(), compute_->stream);
  }
  if (staged_) kernels::launch_cast(out, DType::f32, y.raw(), y.dtype(), y.numel(), compute_->stream);
}

void CudaBatchNorm2d::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  const std::int64_t n = x.numel();
  const void* in = staged_ ? as_f32(x, x_f32_, compute_->stream) : x.raw();
  const void* grad_in = staged_ ? as_f32(dy, y_f32_, compute_->stream) : dy.raw();
  // cuDNN always writes dx: into scratch when the caller needs none or it must be cast back.
  void* out = (dx != nullptr && !staged_) ? dx->raw() : scratch(dx_scratch_, n, staged_ ? DType::f32 : x.dtype()).raw();
  op_for(x.shape()[0])
      .backward(in, grad_in, out, gamma_.f32(), dgamma_.f32(), dbeta_.f32(), save_mean_.f32(), save_inv_std_.f32(),
                compute_->stream);
  if (dx != nullptr && staged_) kernels::launch_cast(out, DType::f32, dx->raw(), dx->dtype(), n, compute_->stream);
}

}  // namespace ringtrain::cuda
