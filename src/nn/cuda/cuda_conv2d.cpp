// CudaConv2d: cuDNN convolution (algorithms chosen once per batch size) plus the bias kernels.
// cuDNN writes the filter gradient in the data dtype; for bf16/f16 it is cast into the f32
// gradient arena.
#include "kernels/activation_kernels.hpp"
#include "kernels/tensor_kernels.hpp"
#include "nn/cuda/cuda_layers.hpp"

namespace ringtrain::cuda {

CudaConv2d::CudaConv2d(ComputePtr compute, const Conv2dOptions& options)
    : Conv2d(options), compute_(std::move(compute)) {}

void CudaConv2d::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  Conv2d::bind(params, grads);
  weight_.bind(w_, compute_->act);
  if (compute_->act != DType::f32) dw_low_ = Tensor::empty(w_.shape(), compute_->act, Device::cuda);
}

ConvOp& CudaConv2d::op_for(std::int64_t batch) {
  return op_.get(batch, [this](std::int64_t n) {
    return std::make_unique<ConvOp>(compute_->dnn,
                                    ConvGeometry{n, c_, h_, w_in_, o_.out_channels, o_.kernel, o_.stride, o_.padding},
                                    compute_->act, compute_->math);
  });
}

void CudaConv2d::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  CudaCompute& c = *compute_;
  const std::int64_t n = x.shape()[0];
  op_for(n).forward(x.raw(), weight_.refresh(c.stream), y.raw(), c.stream);
  if (o_.bias)
    kernels::launch_bias_act_forward(y.raw(), b_.f32(), DType::f32, n, o_.out_channels, oh_ * ow_,
                                     kernels::Activation::none, c.act, c.stream);
}

void CudaConv2d::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  CudaCompute& c = *compute_;
  const std::int64_t n = x.shape()[0];
  ConvOp& op = op_for(n);
  if (c.act == DType::f32) {
    op.backward_filter(x.raw(), dy.raw(), dw_.raw(), c.stream);
  } else {
    op.backward_filter(x.raw(), dy.raw(), dw_low_.raw(), c.stream);
    kernels::launch_cast(dw_low_.raw(), c.act, dw_.raw(), DType::f32, dw_.numel(), c.stream);
  }
  if (o_.bias) kernels::launch_bias_grad(db_.f32(), dy.raw(), n, o_.out_channels, oh_ * ow_, c.act, c.stream);
  if (dx != nullptr) op.backward_data(weight_.get(), dy.raw(), dx->raw(), c.stream);
}

}  // namespace ringtrain::cuda
