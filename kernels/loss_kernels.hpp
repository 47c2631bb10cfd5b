// Host launchers for the fused softmax cross-entropy (forward and backward in one pass) and
// its deterministic batch sums (loss_kernels.cu). Semantics are those of the CPU
// SoftmaxCrossEntropy (src/nn/loss.cpp); the stream is an opaque cudaStream_t.
#pragma once
#include <cstdint>

#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain::kernels {

// logits, dlogits: [n, k] of dtype (f32, bf16, f16); labels, row_loss, row_correct: n each.
// dlogits = (softmax - onehot(label)) * grad_scale; row_loss[i] = -log softmax[i][label];
// row_correct[i] = 1 when the arg-max logit (first index on ties) equals the label, else 0.
// A label outside [0, k) (the CPU reads out of bounds there; the trainer rejects such labels
// up front) gives row_loss NaN, row_correct 0 and dlogits = softmax * grad_scale.
// k must be >= 1 when n > 0.
void launch_softmax_xent(const void* logits, DType dtype, const std::int32_t* labels, std::int64_t n, std::int64_t k,
                         float grad_scale, void* dlogits, float* row_loss, std::int32_t* row_correct, void* stream);

// out[0] = sum of row_loss (as double), out[1] = number of correct rows; one block in a fixed
// order, so the same inputs give the same bits. n == 0 sets both to 0 (a memset, no launch).
void launch_loss_sums(const float* row_loss, const std::int32_t* row_correct, std::int64_t n, double* out,
                      void* stream);

}  // namespace ringtrain::kernels
