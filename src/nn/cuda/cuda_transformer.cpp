// The CUDA layers of a GPT besides Linear and GELU: the residual Add (a kernel; backward hands dy
// on), LayerNorm, the token + position Embedding and causal self-attention (its softmax kernels in
// kernels/transformer_kernels.cu, its GEMMs on cuBLASLt, batched over heads or samples and
// reading and writing the heads' columns of the fused tensors in place). Their scratch (row
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
  const std::int64_t scores = n * heads_ * t_ * t_;
  const auto act = static_cast<std::int64_t>(dtype_size(compute_->act));
  const std::int64_t score_bytes = (scores * 4 + 255) / 256 * 256;
  auto* base = static_cast<char*>(compute_->workspace(static_cast<std::size_t>(score_bytes + scores * act)));
  return Carved{reinterpret_cast<float*>(base), base + score_bytes};
}

// One GEMM per sample over its heads (batched, a head's matrices hs columns apart in the fused
// [N, T, 3C] or [N, T, C] rows, T x T apart in the scores), or one per head over the samples,
// whichever launches fewer: cuBLASLt's batch has one stride, and (sample, head) needs two.
void CudaCausalSelfAttention::head_gemm(GemmShape s, float alpha, Operand a, Operand b, Operand c, DType c_type,
                                        std::int64_t n) {
  CudaCompute& cc = *compute_;
  const bool per_sample = n <= heads_;
  const std::int64_t launches = per_sample ? n : heads_;
  s.batch = per_sample ? heads_ : n;
  s.stride_a = per_sample ? a.per_head : a.per_sample;
  s.stride_b = per_sample ? b.per_head : b.per_sample;
  s.stride_c = per_sample ? c.per_head : c.per_sample;
  const auto ab_size = static_cast<std::int64_t>(dtype_size(cc.act)),
             c_size = static_cast<std::int64_t>(dtype_size(c_type));
  auto at = [&](const Operand& o, std::int64_t i, std::int64_t size) {
    return static_cast<char*>(o.base) + (per_sample ? o.per_sample : o.per_head) * i * size;
  };
  for (std::int64_t i = 0; i < launches; ++i)
    cc.blas.gemm(s, alpha, at(a, i, ab_size), at(b, i, ab_size), 0.0f, at(c, i, c_size), cc.act, c_type, cc.math,
                 cc.stream);
}

// The scaled scores S = q k^T / sqrt(hs) of every head, read in place from x's [N, T, 3C] rows
// (q, k, v side by side, each head hs columns), into c.scores (f32).
void CudaCausalSelfAttention::scores(const Tensor& x, std::int64_t n, const Carved& c) {
  const std::int64_t c3 = 3 * heads_ * hs_, tt = t_ * t_;
  auto* qkv = const_cast<char*>(static_cast<const char*>(x.raw()));  // only read
  const auto act = static_cast<std::int64_t>(dtype_size(compute_->act));
  head_gemm(GemmShape{false, true, t_, t_, hs_, c3, c3, t_}, 1.0f / std::sqrt(static_cast<float>(hs_)),
            Operand{qkv, t_ * c3, hs_}, Operand{qkv + heads_ * hs_ * act, t_ * c3, hs_},
            Operand{c.scores, heads_ * tt, tt}, DType::f32, n);
}

void CudaCausalSelfAttention::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  CudaCompute& cc = *compute_;
  const std::int64_t n = x.shape()[0], batches = n * heads_, c1 = heads_ * hs_, c3 = 3 * c1, tt = t_ * t_;
  const Carved c = carve(n);
  scores(x, n, c);
  scratch(lse_dev_, batches * t_, DType::f32);
  kernels::launch_causal_softmax(c.probs, c.scores, lse_dev_.f32(), nullptr, batches, t_, cc.act, cc.stream);
  // y's head columns = P v
  auto* v =
      const_cast<char*>(static_cast<const char*>(x.raw())) + 2 * c1 * static_cast<std::int64_t>(dtype_size(cc.act));
  head_gemm(GemmShape{false, false, t_, hs_, t_, t_, c3, c1}, 1.0f, Operand{c.probs, heads_ * tt, tt},
            Operand{v, t_ * c3, hs_}, Operand{y.raw(), t_ * c1, hs_}, cc.act, n);
}

// As the CPU layer: dV = P^T dY, dP = dY V^T, dS = P (dP - rowsum(P dP)), dQ = dS K scale,
// dK = dS^T Q scale, each read from and written into the heads' columns of x, dy and dx in place.
void CudaCausalSelfAttention::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  if (dx == nullptr) return;
  CudaCompute& cc = *compute_;
  const std::int64_t n = x.shape()[0], batches = n * heads_, c1 = heads_ * hs_, c3 = 3 * c1, tt = t_ * t_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs_));
  const auto act = static_cast<std::int64_t>(dtype_size(cc.act));
  auto* qkv = const_cast<char*>(static_cast<const char*>(x.raw()));  // only read
  auto* dqkv = static_cast<char*>(dx->raw());
  auto* g = const_cast<char*>(static_cast<const char*>(dy.raw()));  // only read
  const Operand q{qkv, t_ * c3, hs_}, k{qkv + c1 * act, t_ * c3, hs_}, v{qkv + 2 * c1 * act, t_ * c3, hs_};
  const Operand dq{dqkv, t_ * c3, hs_}, dk{dqkv + c1 * act, t_ * c3, hs_}, dv{dqkv + 2 * c1 * act, t_ * c3, hs_};
  const Operand d_y{g, t_ * c1, hs_};
  const Carved c = carve(n);
  const Operand probs{c.probs, heads_ * tt, tt}, d_p{c.scores, heads_ * tt, tt};
  scores(x, n, c);
  kernels::launch_causal_softmax(c.probs, c.scores, nullptr, lse_dev_.f32(), batches, t_, cc.act, cc.stream);
  head_gemm(GemmShape{true, false, t_, hs_, t_, t_, c1, c3}, 1.0f, probs, d_y, dv, cc.act, n);   // dV = P^T dY
  head_gemm(GemmShape{false, true, t_, t_, hs_, c1, c3, t_}, 1.0f, d_y, v, d_p, DType::f32, n);  // dP = dY V^T
  kernels::launch_causal_softmax_backward(c.probs, c.scores, batches, t_, cc.act, cc.stream);    // probs := dS
  head_gemm(GemmShape{false, false, t_, hs_, t_, t_, c3, c3}, scale, probs, k, dq, cc.act, n);   // dQ = dS K scale
  head_gemm(GemmShape{true, false, t_, hs_, t_, t_, c3, c3}, scale, probs, q, dk, cc.act, n);    // dK = dS^T Q scale
}

}  // namespace ringtrain::cuda
