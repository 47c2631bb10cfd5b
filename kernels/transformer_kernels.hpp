// Host launchers for the transformer layers' own kernels (transformer_kernels.cu): LayerNorm
// forward/backward, the token + position embedding forward/backward, and attention's causal
// softmax and its backward. Activations are f32, bf16 or f16 (computed in float); parameters,
// their gradients and the saved row statistics are f32. Every reduction runs in a fixed order (no
// float atomics), so repeated runs give the same bits. The stream is an opaque cudaStream_t;
// launches are checked.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain::kernels {

// LayerNorm over rows of c elements: y = (x - mean) * rstd * weight + bias, with the biased
// variance and rstd = 1 / sqrt(var + eps); mean and rstd ([rows], f32) saved for backward.
void launch_layernorm_forward(void* y, const void* x, const float* weight, const float* bias, float* mean, float* rstd,
                              std::int64_t rows, std::int64_t c, float eps, DType dtype, void* stream);

// f32 elements of the scratch launch_layernorm_backward needs for `rows` rows of c.
std::int64_t layernorm_backward_scratch(std::int64_t rows, std::int64_t c);

// With xhat = (x - mean) rstd and g = dy * weight: dx = rstd (g - mean(g) - xhat mean(g xhat))
// (dx may be null), dweight = sum over rows of dy xhat, dbias = sum over rows of dy (both
// overwritten; summed per chunk of rows, then over the chunks in order, through `scratch`).
void launch_layernorm_backward(void* dx, float* dweight, float* dbias, const void* dy, const void* x,
                               const float* weight, const float* mean, const float* rstd, std::int64_t rows,
                               std::int64_t c, float* scratch, DType dtype, void* stream);

// Embedding forward over rows = N * t positions: y[r] = wte[tokens[r]] + wpe[position + r % t]
// (rows of c). Token ids outside [0, vocab) are clamped (the data readers reject them first).
void launch_embedding_forward(void* y, const std::int32_t* tokens, const float* wte, const float* wpe,
                              std::int64_t rows, std::int64_t t, std::int64_t c, std::int64_t vocab,
                              std::int64_t position, DType dtype, void* stream);

// Bytes of the scratch launch_embedding_backward needs for `rows` positions.
std::size_t embedding_backward_scratch_bytes(std::int64_t rows, std::int64_t vocab);

// The tables' gradients (both overwritten, rows that no position uses set to zero):
// dwpe[p] = sum over samples of dy at position p; dwte[v] = sum of dy over the positions holding
// token v, added in batch order (the positions sorted by token with a stable radix sort), so
// the f32 sums equal the CPU layer's bit for bit. dwte may be null (not needed).
void launch_embedding_backward(float* dwte, float* dwpe, const void* dy, const std::int32_t* tokens, std::int64_t rows,
                               std::int64_t t, std::int64_t c, std::int64_t vocab, std::int64_t block, void* scratch,
                               std::size_t scratch_bytes, DType dtype, void* stream);

// Causal softmax of `batches` [t, t] f32 score matrices (already scaled), row i seeing columns
// 0..i: p (dtype) gets the probabilities (0 above the diagonal). With lse_out, each row's
// log-sum-exp is stored ([batches * t] f32); with lse_in instead, p = exp(s - lse_in) is
// recomputed from a forward's values.
void launch_causal_softmax(void* p, const float* s, float* lse_out, const float* lse_in, std::int64_t batches,
                           std::int64_t t, DType dtype, void* stream);

// The causal softmax's backward in place over `batches` [t, t] matrices: ds = p (dp - sum over
// the visible columns of p dp) written over p (dtype) for row i's columns 0..i, 0 above the
// diagonal, where dp (f32) is not read.
void launch_causal_softmax_backward(void* p_then_ds, const float* dp, std::int64_t batches, std::int64_t t, DType dtype,
                                    void* stream);

}  // namespace ringtrain::kernels
