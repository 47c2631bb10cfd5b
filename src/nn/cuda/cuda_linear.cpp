// CudaLinear: y = x W^T + b as one cuBLASLt GEMM plus the bias kernel; backward is two GEMMs
// (dW in f32 straight from low-precision inputs, dx) and the bias-gradient reduction.
#include "kernels/activation_kernels.hpp"
#include "nn/cuda/cuda_layers.hpp"

namespace ringtrain::cuda {

CudaLinear::CudaLinear(ComputePtr compute, std::int64_t out_features, bool bias)
    : Linear(out_features, bias), compute_(std::move(compute)) {}

void CudaLinear::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  Linear::bind(params, grads);
  weight_.bind(w_, compute_->act);
}

void CudaLinear::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  CudaCompute& c = *compute_;
  const std::int64_t n = x.shape()[0];
  const void* w = weight_.refresh(c.stream);
  c.blas.gemm(GemmShape{false, true, n, out_, in_, in_, in_, out_}, 1.0f, x.raw(), w, 0.0f, y.raw(), c.act, c.act,
              c.math, c.stream);
  if (has_bias_)
    kernels::launch_bias_act_forward(y.raw(), b_.f32(), n, out_, 1, kernels::Activation::none, c.act, c.stream);
}

void CudaLinear::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  CudaCompute& c = *compute_;
  const std::int64_t n = x.shape()[0];
  c.blas.gemm(GemmShape{true, false, out_, in_, n, out_, in_, in_}, 1.0f, dy.raw(), x.raw(), 0.0f, dw_.raw(), c.act,
              DType::f32, c.math, c.stream);
  if (has_bias_) kernels::launch_bias_grad(db_.f32(), dy.raw(), n, out_, 1, c.act, c.stream);
  if (dx != nullptr)
    c.blas.gemm(GemmShape{false, false, n, in_, out_, out_, in_, in_}, 1.0f, dy.raw(), weight_.get(), 0.0f,
                dx->raw(), c.act, c.act, c.math, c.stream);
}

}  // namespace ringtrain::cuda
