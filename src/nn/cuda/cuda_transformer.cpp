// The CUDA layers of a GPT besides Linear and GELU: the residual Add (a kernel; backward hands dy
// on), LayerNorm, the token + position Embedding and causal self-attention (its kernels in
// kernels/transformer_kernels.cu, its GEMMs batched over heads on cuBLASLt). Their scratch (row
// statistics, partial sums, the embedding's sort) grows with the largest batch seen.
#include <cmath>

#include "check/cuda_check.hpp"
#include "kernels/tensor_kernels.hpp"
#include "kernels/transformer_kernels.hpp"
#include "nn/cuda/cuda_layers.hpp"

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
  const std::int64_t per_head = n * heads_ * t_ * hs_, scores = n * heads_ * t_ * t_;
  const auto act = static_cast<std::int64_t>(dtype_size(compute_->act));
  auto aligned = [](std::int64_t bytes) { return (bytes + 255) / 256 * 256; };
  const std::int64_t head_bytes = aligned(per_head * act), score_bytes = aligned(scores * 4);
  auto* base =
      static_cast<char*>(compute_->workspace(static_cast<std::size_t>(5 * head_bytes + score_bytes + scores * act)));
  Carved c{};
  void** heads[] = {&c.q, &c.k, &c.v, &c.a, &c.b};
  for (std::size_t i = 0; i < 5; ++i) *heads[i] = base + static_cast<std::int64_t>(i) * head_bytes;
  c.scores = reinterpret_cast<float*>(base + 5 * head_bytes);
  c.probs = base + 5 * head_bytes + score_bytes;
  return c;
}

void CudaCausalSelfAttention::scores(const Tensor& x, std::int64_t n, const Carved& c) {
  CudaCompute& cc = *compute_;
  kernels::launch_split_qkv(c.q, c.k, c.v, x.raw(), n, t_, heads_, hs_, cc.act, cc.stream);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs_));
  // S = q k^T scale per head, in f32
  cc.blas.gemm(GemmShape{false, true, t_, t_, hs_, hs_, hs_, t_, n * heads_, t_ * hs_, t_ * hs_, t_ * t_}, scale, c.q,
               c.k, 0.0f, c.scores, cc.act, DType::f32, cc.math, cc.stream);
}

void CudaCausalSelfAttention::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  CudaCompute& cc = *compute_;
  const std::int64_t n = x.shape()[0], batches = n * heads_;
  const Carved c = carve(n);
  scores(x, n, c);
  scratch(lse_dev_, batches * t_, DType::f32);
  kernels::launch_causal_softmax(c.probs, c.scores, lse_dev_.f32(), nullptr, batches, t_, cc.act, cc.stream);
  // y per head (into a) = P v, then the heads side by side
  cc.blas.gemm(GemmShape{false, false, t_, hs_, t_, t_, hs_, hs_, batches, t_ * t_, t_ * hs_, t_ * hs_}, 1.0f, c.probs,
               c.v, 0.0f, c.a, cc.act, cc.act, cc.math, cc.stream);
  kernels::launch_merge_heads(y.raw(), c.a, n, t_, heads_, hs_, cc.act, cc.stream);
}

// As the CPU layer: dV = P^T dY, dP = dY V^T, dS = P (dP - rowsum(P dP)), dQ = dS K scale,
// dK = dS^T Q scale. Buffers: a holds dY per head, then dK; b holds dV; v's slot takes dQ once
// dP no longer needs v. dQ, dK and dV are merged into dx together.
void CudaCausalSelfAttention::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  if (dx == nullptr) return;
  CudaCompute& cc = *compute_;
  const std::int64_t n = x.shape()[0], batches = n * heads_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs_));
  const std::int64_t th = t_ * hs_, tt = t_ * t_;
  const Carved c = carve(n);
  scores(x, n, c);
  kernels::launch_causal_softmax(c.probs, c.scores, nullptr, lse_dev_.f32(), batches, t_, cc.act, cc.stream);
  kernels::launch_split_heads(c.a, dy.raw(), n, t_, heads_, hs_, cc.act, cc.stream);
  // dV = P^T dY (into b)
  cc.blas.gemm(GemmShape{true, false, t_, hs_, t_, t_, hs_, hs_, batches, tt, th, th}, 1.0f, c.probs, c.a, 0.0f, c.b,
               cc.act, cc.act, cc.math, cc.stream);
  // dP = dY V^T (f32, over the scores)
  cc.blas.gemm(GemmShape{false, true, t_, t_, hs_, hs_, hs_, t_, batches, th, th, tt}, 1.0f, c.a, c.v, 0.0f, c.scores,
               cc.act, DType::f32, cc.math, cc.stream);
  kernels::launch_causal_softmax_backward(c.probs, c.scores, batches, t_, cc.act, cc.stream);
  // dQ = dS K scale (into v: v is no longer needed), dK = dS^T Q scale (into a: dY is not either)
  cc.blas.gemm(GemmShape{false, false, t_, hs_, t_, t_, hs_, hs_, batches, tt, th, th}, scale, c.probs, c.k, 0.0f, c.v,
               cc.act, cc.act, cc.math, cc.stream);
  cc.blas.gemm(GemmShape{true, false, t_, hs_, t_, t_, hs_, hs_, batches, tt, th, th}, scale, c.probs, c.q, 0.0f, c.a,
               cc.act, cc.act, cc.math, cc.stream);
  kernels::launch_merge_qkv(dx->raw(), c.v, c.a, c.b, n, t_, heads_, hs_, cc.act, cc.stream);
}

}  // namespace ringtrain::cuda
