// The GEMMs of causal self-attention on the fused layouts, planned once for both backends' use:
// the CUDA layer runs them on cuBLASLt, the unit tests with blas::sgemm (so CI checks the
// bookkeeping without a GPU). q, k and v are read in place from the heads' columns of
// x [N, T, 3C] (q | k | v, head h in columns h*hs..(h+1)*hs of each), dY from dy [N, T, C], and
// Y, dQ, dK, dV are written likewise into y [N, T, C] and dx [N, T, 3C]; the scores (f32) and the
// probabilities are [N * heads, T, T]. A (sample, head) pair needs two strides and a GEMM batch
// has one, so each product is one launch per sample over its heads, or one per head over the
// samples, whichever launches fewer.
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/gemm_shape.hpp"

namespace ringtrain {

class AttentionGemms {
 public:
  // The scores are f32; the rest hold the activation dtype.
  enum class Buffer { x, y, dy, dx, scores, probs };
  // One GEMM call: its shape with batch and strides, and where A, B and C start (elements into
  // their buffers).
  struct Launch {
    GemmShape shape;
    std::int64_t a, b, c;
  };
  // C = alpha op(A) op(B) (beta 0) for every head of every sample.
  struct Product {
    float alpha;
    Buffer a, b, c;
    std::vector<Launch> launches;
  };

  AttentionGemms(std::int64_t samples, std::int64_t t, std::int64_t heads, std::int64_t head_size);
  Product scores() const;      // S = q k^T / sqrt(hs) into scores
  Product output() const;      // Y = P v from probs into y
  Product value_grad() const;  // dV = P^T dY into dx's v columns
  Product prob_grad() const;   // dP = dY v^T into scores
  Product query_grad() const;  // dQ = dS k / sqrt(hs), dS in probs, into dx's q columns
  Product key_grad() const;    // dK = dS^T q / sqrt(hs) into dx's k columns

 private:
  // A matrix operand: sample 0 head 0 at `offset`, the next sample and head that many elements on.
  struct Operand {
    Buffer buffer;
    std::int64_t offset, per_sample, per_head;
  };
  Operand fused(Buffer buffer, int part) const;  // q (0), k (1) or v (2) of x or dx
  Operand heads(Buffer buffer) const;            // y or dy
  Operand square(Buffer buffer) const;           // scores or probs
  Product product(GemmShape shape, float alpha, const Operand& a, const Operand& b, const Operand& c) const;
  std::int64_t n_, t_, heads_, hs_;
};

}  // namespace ringtrain
