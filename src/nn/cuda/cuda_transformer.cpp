// The CUDA layers of a GPT besides Linear and GELU: the residual Add (a kernel; backward hands dy
// on), LayerNorm, the token + position Embedding and causal self-attention (cuDNN's fused
// attention, nn/cuda/cudnn_attention.hpp, where it can be built; otherwise its softmax kernels in
// kernels/transformer_kernels.cu and its GEMMs as nn/attention_gemms.hpp plans them, on
// cuBLASLt). Their scratch (row statistics, partial sums, the embedding's sort) grows with the
// largest batch seen.
#include <atomic>
#include <cmath>
#include <string>

#include "check/cuda_check.hpp"
#include "kernels/tensor_kernels.hpp"
#include "kernels/transformer_kernels.hpp"
#include "nn/cuda/cuda_layers.hpp"
#include "ringtrain/core/log.hpp"

namespace ringtrain::cuda {
void CudaAdd::forward_many(const std::vector<const Tensor*>& x, Tensor& y, const StepInfo&) {
  kernels::launch_add(y.raw(), x[0]->raw(), x[1]->raw(), y.numel(), y.dtype(), compute_->stream);
}

void CudaAdd::backward_many(const std::vector<const Tensor*>&, const Tensor&, const Tensor& dy,
                            const std::vector<Tensor*>& dx) {
  for (Tensor* d : dx)
    if (d != nullptr) copy_on_device(d->raw(), dy.raw(), dy.nbytes(), compute_->stream);
}

void CudaLayerNorm::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  const std::int64_t rows = x.numel() / c_;
  scratch(mean_dev_, rows, DType::f32);
  scratch(rstd_dev_, rows, DType::f32);
  kernels::launch_layernorm_forward(y.raw(), x.raw(), gamma_.f32(), beta_.f32(), mean_dev_.f32(), rstd_dev_.f32(), rows,
                                    c_, eps_, x.dtype(), compute_->stream);
}

void CudaLayerNorm::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  const std::int64_t rows = x.numel() / c_;
  scratch(scratch_, kernels::layernorm_backward_scratch(rows, c_), DType::f32);
  kernels::launch_layernorm_backward(dx != nullptr ? dx->raw() : nullptr, dgamma_.f32(), dbeta_.f32(), dy.raw(),
                                     x.raw(), gamma_.f32(), mean_dev_.f32(), rstd_dev_.f32(), rows, c_, scratch_.f32(),
                                     x.dtype(), compute_->stream);
}

void CudaEmbedding::start_decoding(std::int64_t) {
  throw ConfigError("embedding: decoding (ringtrain generate) runs on the CPU backend only");
}

void CudaEmbedding::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  kernels::launch_embedding_forward(y.raw(), x.data<std::int32_t>(), wte_.f32(), wpe_.f32(), x.numel(), t_, c_, vocab_,
                                    0, y.dtype(), compute_->stream);
}

void CudaEmbedding::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor*) {
  const std::int64_t rows = x.numel();
  const auto bytes = static_cast<std::int64_t>(kernels::embedding_backward_scratch_bytes(rows, vocab_));
  scratch(scratch_, bytes, DType::u8);
  kernels::launch_embedding_backward(dwte_.f32(), dwpe_.f32(), dy.raw(), x.data<std::int32_t>(), rows, t_, c_, vocab_,
                                     block_, scratch_.raw(), static_cast<std::size_t>(scratch_.nbytes()), dy.dtype(),
                                     compute_->stream);
}

void CudaCausalSelfAttention::start_decoding(std::int64_t) {
  throw ConfigError("attention: decoding (ringtrain generate) runs on the CPU backend only");
}

CudaCausalSelfAttention::Carved CudaCausalSelfAttention::carve(std::int64_t n) {
  const std::int64_t scores = n * heads_ * t_ * t_;
  const auto act = static_cast<std::int64_t>(dtype_size(compute_->act));
  const std::int64_t score_bytes = (scores * 4 + 255) / 256 * 256;
  auto* base = static_cast<char*>(compute_->workspace(static_cast<std::size_t>(score_bytes + scores * act)));
  return Carved{reinterpret_cast<float*>(base), base + score_bytes};
}

void CudaCausalSelfAttention::run(const AttentionGemms::Product& product, const Buffers& buffers) {
  CudaCompute& cc = *compute_;
  auto dtype_of = [&](AttentionGemms::Buffer buffer) {
    return buffer == AttentionGemms::Buffer::scores ? DType::f32 : cc.act;
  };
  auto at = [&](AttentionGemms::Buffer buffer, std::int64_t offset) {
    return static_cast<char*>(buffers[static_cast<std::size_t>(buffer)]) +
           offset * static_cast<std::int64_t>(dtype_size(dtype_of(buffer)));
  };
  for (const AttentionGemms::Launch& l : product.launches)
    cc.blas.gemm(l.shape, product.alpha, at(product.a, l.a), at(product.b, l.b), 0.0f, at(product.c, l.c), cc.act,
                 dtype_of(product.c), cc.math, cc.stream);
}

CudnnAttention* CudaCausalSelfAttention::fused_for(std::int64_t n) {
  if (kernel_ == AttentionKernel::unfused) return nullptr;
  auto it = fused_.find(n);
  if (it != fused_.end()) return it->second.get();
  std::string why_not;
  auto fused = CudnnAttention::create(compute_->dnn, AttentionShape{n, t_, heads_, hs_}, compute_->act, why_not);
  RT_REQUIRE(fused != nullptr || kernel_ != AttentionKernel::fused, Error, "attention: no fused kernel: {}", why_not);
  static std::atomic<bool> warned{false};  // one line per process, not per layer and batch size
  if (fused == nullptr && compute_->act != DType::f32 && !warned.exchange(true))
    log::warn(
        "attention: running the unfused attention (GEMMs and softmax kernels, several times slower at long "
        "blocks): {}",
        why_not);
  return fused_.emplace(n, std::move(fused)).first->second.get();
}

void CudaCausalSelfAttention::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  CudaCompute& cc = *compute_;
  const std::int64_t n = x.shape()[0];
  scratch(lse_dev_, n * heads_ * t_, DType::f32);
  if (CudnnAttention* fused = fused_for(n)) {
    fused->forward(x.raw(), y.raw(), lse_dev_.f32(), cc.workspace(fused->workspace_bytes()), cc.stream);
    return;
  }
  forward_unfused(x, y);
}

void CudaCausalSelfAttention::backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) {
  if (dx == nullptr) return;
  CudaCompute& cc = *compute_;
  if (CudnnAttention* fused = fused_for(x.shape()[0])) {
    fused->backward(x.raw(), y.raw(), dy.raw(), lse_dev_.f32(), dx->raw(), cc.workspace(fused->workspace_bytes()),
                    cc.stream);
    return;
  }
  backward_unfused(x, dy, *dx);
}

void CudaCausalSelfAttention::forward_unfused(const Tensor& x, Tensor& y) {
  CudaCompute& cc = *compute_;
  const std::int64_t n = x.shape()[0], batches = n * heads_;
  const Carved c = carve(n);
  const AttentionGemms plan(n, t_, heads_, hs_);
  const Buffers buffers{const_cast<void*>(x.raw()), y.raw(), nullptr, nullptr, c.scores, c.probs};  // x only read
  run(plan.scores(), buffers);
  kernels::launch_causal_softmax(c.probs, c.scores, lse_dev_.f32(), nullptr, batches, t_, cc.act, cc.stream);
  run(plan.output(), buffers);
}

// As the CPU layer: dV = P^T dY, dP = dY V^T, dS = P (dP - rowsum(P dP)), dQ = dS K scale,
// dK = dS^T Q scale, with P recomputed from the forward's log-sum-exp; dP over the scores and dS
// over the probabilities.
void CudaCausalSelfAttention::backward_unfused(const Tensor& x, const Tensor& dy, Tensor& dx) {
  CudaCompute& cc = *compute_;
  const std::int64_t n = x.shape()[0], batches = n * heads_;
  const Carved c = carve(n);
  const AttentionGemms plan(n, t_, heads_, hs_);
  const Buffers buffers{const_cast<void*>(x.raw()),
                        nullptr,
                        const_cast<void*>(dy.raw()),
                        dx.raw(),
                        c.scores,
                        c.probs};  // x and dy only read
  run(plan.scores(), buffers);
  kernels::launch_causal_softmax(c.probs, c.scores, nullptr, lse_dev_.f32(), batches, t_, cc.act, cc.stream);
  run(plan.value_grad(), buffers);
  run(plan.prob_grad(), buffers);
  kernels::launch_causal_softmax_backward(c.probs, c.scores, batches, t_, cc.act, cc.stream);
  run(plan.query_grad(), buffers);
  run(plan.key_grad(), buffers);
}

}  // namespace ringtrain::cuda
