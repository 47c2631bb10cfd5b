// CudaLinear: y = x W^T + b as one cuBLASLt GEMM with the bias (in the activation dtype, as the
// compute copy holds it) and an absorbed ReLU in its epilogue; backward is two GEMMs, dW (in f32
// straight from low-precision inputs, the bias gradient in its epilogue) and dx, after the
// absorbed ReLU's rule is applied to dy in place. When the next layer is a CudaLinear that alone
// reads this one's output, the ReLU's rule goes into that layer's dx GEMM instead (cuBLASLt's
// DRELU epilogue, reading the bit-mask this layer's forward wrote), and no pass is left for it.
// (Its bias gradient stays in this layer's dW GEMM: DRELU_BGRAD would write it during the next
// layer's backward, where ZeRO stage 2 may not have this layer's gradient bucket placed yet.)
// A GELU after it is absorbed the same way in bf16/f16 (a GPT's MLP): the forward GEMM's epilogue
// applies it and keeps its input, and the next Linear's dx GEMM applies its slope (DGELU), or
// this layer's backward does with the GELU kernel.
// A large layer without a ReLU whose outputs are not whole 16-byte vectors (a GPT's LM head over
// 50257 tokens) runs its GEMMs over outputs padded to them: W and b copied into zero-padded
// buffers each forward (W: a few percent of the GEMMs' traffic), y computed in padded rows in the
// model's workspace and copied over, dy copied into zero-padded rows for backward. cuBLASLt's
// unaligned kernels would take several times longer (and any dimension of 50257 makes them so).
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
  // In f32 the separate kernel stays: its GELU is the CPU's to 1e-6, cuBLASLt's tanh may not be.
  gelu_after_ = typeid(consumer) == typeid(CudaGelu) && compute_->act != DType::f32;
  return relu_after_ || gelu_after_;
}

bool CudaLinear::fuse_producer_gradient(Layer& producer) {
  auto* linear = dynamic_cast<CudaLinear*>(&producer);
  if (linear == nullptr) return false;
  if (linear->relu_after_) {
    linear->relu_gradient_by_consumer_ = true;
    relu_producer_ = linear;
    return true;
  }
  if (linear->gelu_after_) {
    linear->gelu_gradient_by_consumer_ = true;
    gelu_producer_ = linear;
    return true;
  }
  return false;
}

std::int64_t CudaLinear::padded_out(std::int64_t n) const {
  const DType act = compute_->act;
  if (relu_after_ || gelu_after_ ||
      !costly_unaligned_rows(GemmShape{false, true, n, out_, in_, in_, in_, out_}, act, act))
    return out_;
  const auto per_vector = static_cast<std::int64_t>(16 / dtype_size(act));
  return (out_ + per_vector - 1) / per_vector * per_vector;
}

void CudaLinear::refresh_padded(std::int64_t cols, const void* w, const void* b) {
  CudaCompute& c = *compute_;
  const auto elem = static_cast<std::size_t>(dtype_size(c.act));
  if (padded_weight_.numel() != cols * in_) {  // zero-filled: the rows past out_ stay 0
    padded_weight_ = Tensor::empty(Shape{cols, in_}, c.act, Device::cuda);
    if (has_bias_) padded_bias_ = Tensor::empty(Shape{cols}, c.act, Device::cuda);
  }
  copy_on_device(padded_weight_.raw(), w, static_cast<std::size_t>(out_ * in_) * elem, c.stream);
  if (has_bias_) copy_on_device(padded_bias_.raw(), b, static_cast<std::size_t>(out_) * elem, c.stream);
}

void CudaLinear::forward(const Tensor& x, Tensor& y, const StepInfo& info) {
  CudaCompute& c = *compute_;
  const std::int64_t n = rows_of(x), cols = padded_out(n);
  const auto elem = static_cast<std::int64_t>(dtype_size(c.act));
  const void* w = weight_.refresh(c.stream);
  void* b = has_bias_ ? bias_.refresh(c.stream) : nullptr;
  void* out = y.raw();
  if (cols != out_) {
    refresh_padded(cols, w, b);
    w = padded_weight_.raw();
    b = has_bias_ ? padded_bias_.raw() : nullptr;
    out = c.workspace(static_cast<std::size_t>(n * cols * elem));
  }
  Epilogue epilogue =
      relu_after_ ? (has_bias_ ? Epilogue::bias_relu : Epilogue::relu) : (has_bias_ ? Epilogue::bias : Epilogue::none);
  GeluAux gelu;
  if (gelu_after_) {
    gelu = GeluAux{scratch(gelu_input_, n * out_, c.act).raw(), out_};
    epilogue = has_bias_ ? Epilogue::bias_gelu_aux : Epilogue::gelu_aux;
  }
  ReluMask mask;
  const bool masked = relu_gradient_by_consumer_ && info.training;  // never padded: a ReLU follows
  if (masked) {
    mask.ld = ReluMask::row_bits(out_);
    mask.bits = scratch(relu_mask_, mask.ld / 8 * n, DType::u8).raw();
    epilogue = has_bias_ ? Epilogue::bias_relu_mask : Epilogue::relu_mask;
  }
  const bool fused =
      c.blas.gemm(GemmShape{false, true, n, cols, in_, in_, in_, cols}, 1.0f, x.raw(), w, 0.0f, out, c.act, c.act,
                  c.math, c.stream, epilogue, b, masked ? &mask : nullptr, gelu_after_ ? &gelu : nullptr);
  relu_mask_written_ = masked && fused;
  if (cols != out_) copy_rows_on_device(y.raw(), out_ * elem, out, cols * elem, out_ * elem, n, c.stream);
}

void CudaLinear::backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) {
  CudaCompute& c = *compute_;
  const std::int64_t n = rows_of(x), cols = padded_out(n);
  if (relu_after_ && !relu_gradient_by_consumer_)
    kernels::launch_relu_backward(dy.raw(), y.raw(), dy.raw(), y.numel(), y.dtype(), c.stream);
  if (gelu_after_ && !gelu_gradient_by_consumer_)
    kernels::launch_gelu_backward(dy.raw(), gelu_input_.raw(), dy.raw(), y.numel(), y.dtype(), c.stream);
  const void* g = dy.raw();  // dy and W as the GEMMs read them: padded (zeros) where forward's were
  const void* w = weight_.get();
  if (cols != out_) {
    const auto elem = static_cast<std::int64_t>(dtype_size(c.act));
    void* rows = c.workspace(static_cast<std::size_t>(n * cols * elem));
    pad_rows_on_device(rows, cols * elem, dy.raw(), out_ * elem, n, c.stream);
    g = rows;
    w = padded_weight_.raw();
  }
  // The bias-gradient epilogue reads A packed: over padded rows the kernel sums the packed dy.
  const bool bias_in_epilogue = has_bias_ && cols == out_;
  c.blas.gemm(GemmShape{true, false, out_, in_, n, cols, in_, in_}, 1.0f, g, x.raw(), 0.0f, dw_.raw(), c.act,
              DType::f32, c.math, c.stream, bias_in_epilogue ? Epilogue::bias_grad : Epilogue::none,
              bias_in_epilogue ? db_.f32() : nullptr);
  if (has_bias_ && !bias_in_epilogue) kernels::launch_bias_grad(db_.f32(), dy.raw(), n, out_, 1, c.act, c.stream);
  if (dx == nullptr) return;
  const GemmShape input_grad{false, false, n, in_, cols, cols, in_, in_};
  if (gelu_producer_ != nullptr) {  // x is the producer's GELU output; its input gives the rule
    const GeluAux gelu{gelu_producer_->gelu_input_.raw(), in_};
    c.blas.gemm(input_grad, 1.0f, g, w, 0.0f, dx->raw(), c.act, c.act, c.math, c.stream, Epilogue::gelu_grad, nullptr,
                nullptr, &gelu);
    return;
  }
  if (relu_producer_ == nullptr) {
    c.blas.gemm(input_grad, 1.0f, g, w, 0.0f, dx->raw(), c.act, c.act, c.math, c.stream);
    return;
  }
  // x is the producer's output after its ReLU: the rule's source when its bit-mask is not there
  const ReluMask mask{relu_producer_->relu_mask_written_ ? relu_producer_->relu_mask_.raw() : nullptr,
                      ReluMask::row_bits(in_), x.raw()};
  c.blas.gemm(input_grad, 1.0f, g, w, 0.0f, dx->raw(), c.act, c.act, c.math, c.stream, Epilogue::relu_grad, nullptr,
              &mask);
}

}  // namespace ringtrain::cuda
