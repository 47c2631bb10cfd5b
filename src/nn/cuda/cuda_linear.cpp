// CudaLinear: y = x W^T + b as one cuBLASLt GEMM with the bias (in the activation dtype, as the
// compute copy holds it) and an absorbed ReLU in its epilogue; backward is two GEMMs, dW (in f32
// straight from low-precision inputs, the bias gradient in its epilogue) and dx, after the
// absorbed ReLU's rule is applied to dy in place. When the next layer is a CudaLinear that alone
// reads this one's output, the ReLU's rule goes into that layer's dx GEMM instead (cuBLASLt's
// DRELU epilogue, reading the bit-mask this layer's forward wrote), and no pass is left for it.
// (Its bias gradient stays in this layer's dW GEMM: DRELU_BGRAD would write it during the next
// layer's backward, where ZeRO stage 2 may not have this layer's gradient bucket placed yet.)
// A large layer whose output rows are not whole 16-byte vectors (a GPT's LM head over 50257
// tokens) runs its GEMMs on rows padded to them in the model's workspace, with one strided copy
// of y (forward) or dy (backward) between the two layouts: cuBLASLt's unaligned kernels would
// take several times longer.
#include <typeinfo>

#include "kernels/activation_kernels.hpp"
#include "nn/cuda/cuda_layers.hpp"

namespace ringtrain::cuda {

CudaLinear::CudaLinear(ComputePtr compute, std::int64_t out_features, bool bias, double init_std)
    : Linear(out_features, bias, init_std), compute_(std::move(compute)) {}

void CudaLinear::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  Linear::bind(params, grads);
  weight_.bind(w_, compute_->act);
  if (has_bias_) bias_.bind(b_, compute_->act);
}

void CudaLinear::bind_compute(const std::vector<Tensor>& compute) {
  weight_.use(compute[0]);
  if (has_bias_) bias_.use(compute[1]);
}

bool CudaLinear::absorb_consumer(const Layer& consumer) {
  relu_after_ = typeid(consumer) == typeid(CudaReLU);
  return relu_after_;
}

bool CudaLinear::fuse_producer_gradient(Layer& producer) {
  auto* linear = dynamic_cast<CudaLinear*>(&producer);
  if (linear == nullptr || !linear->relu_after_) return false;
  linear->relu_gradient_by_consumer_ = true;
  relu_producer_ = linear;
  return true;
}

std::int64_t CudaLinear::gemm_ld(std::int64_t n) const {
  const DType act = compute_->act;
  if (!costly_unaligned_rows(GemmShape{false, true, n, out_, in_, in_, in_, out_}, act, act)) return out_;
  const auto per_vector = static_cast<std::int64_t>(16 / dtype_size(act));
  return (out_ + per_vector - 1) / per_vector * per_vector;
}

void CudaLinear::forward(const Tensor& x, Tensor& y, const StepInfo& info) {
  CudaCompute& c = *compute_;
  const std::int64_t n = rows_of(x), ld = gemm_ld(n);
  const auto elem = static_cast<std::int64_t>(dtype_size(c.act));
  void* out = ld == out_ ? y.raw() : c.workspace(static_cast<std::size_t>(n * ld * elem));
  const void* w = weight_.refresh(c.stream);
  void* b = has_bias_ ? bias_.refresh(c.stream) : nullptr;
  Epilogue epilogue =
      relu_after_ ? (has_bias_ ? Epilogue::bias_relu : Epilogue::relu) : (has_bias_ ? Epilogue::bias : Epilogue::none);
  ReluMask mask;
  const bool masked = relu_gradient_by_consumer_ && info.training;
  if (masked) {
    mask.ld = ReluMask::row_bits(out_);
    mask.bits = scratch(relu_mask_, mask.ld / 8 * n, DType::u8).raw();
    epilogue = has_bias_ ? Epilogue::bias_relu_mask : Epilogue::relu_mask;
  }
  const bool fused = c.blas.gemm(GemmShape{false, true, n, out_, in_, in_, in_, ld}, 1.0f, x.raw(), w, 0.0f, out, c.act,
                                 c.act, c.math, c.stream, epilogue, b, masked ? &mask : nullptr);
  relu_mask_written_ = masked && fused;
  if (ld != out_) copy_rows_on_device(y.raw(), out_ * elem, out, ld * elem, out_ * elem, n, c.stream);
}

void CudaLinear::backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) {
  CudaCompute& c = *compute_;
  const std::int64_t n = rows_of(x), ld = gemm_ld(n);
  if (relu_after_ && !relu_gradient_by_consumer_)
    kernels::launch_relu_backward(dy.raw(), y.raw(), dy.raw(), y.numel(), y.dtype(), c.stream);
  const void* g = dy.raw();  // dy as the GEMMs read it: in padded rows where forward wrote them
  if (ld != out_) {
    const auto elem = static_cast<std::int64_t>(dtype_size(c.act));
    void* padded = c.workspace(static_cast<std::size_t>(n * ld * elem));
    copy_rows_on_device(padded, ld * elem, dy.raw(), out_ * elem, out_ * elem, n, c.stream);
    g = padded;
  }
  c.blas.gemm(GemmShape{true, false, out_, in_, n, ld, in_, in_}, 1.0f, g, x.raw(), 0.0f, dw_.raw(), c.act, DType::f32,
              c.math, c.stream, has_bias_ ? Epilogue::bias_grad : Epilogue::none, has_bias_ ? db_.f32() : nullptr);
  if (dx == nullptr) return;
  const GemmShape input_grad{false, false, n, in_, out_, ld, in_, in_};
  if (relu_producer_ == nullptr) {
    c.blas.gemm(input_grad, 1.0f, g, weight_.get(), 0.0f, dx->raw(), c.act, c.act, c.math, c.stream);
    return;
  }
  // x is the producer's output after its ReLU: the rule's source when its bit-mask is not there
  const ReluMask mask{relu_producer_->relu_mask_written_ ? relu_producer_->relu_mask_.raw() : nullptr,
                      ReluMask::row_bits(in_), x.raw()};
  c.blas.gemm(input_grad, 1.0f, g, weight_.get(), 0.0f, dx->raw(), c.act, c.act, c.math, c.stream, Epilogue::relu_grad,
              nullptr, &mask);
}

}  // namespace ringtrain::cuda
