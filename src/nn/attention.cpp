// CausalSelfAttention: y = softmax(q k^T / sqrt(hs) + causal mask) v per (sample, head), with
// GEMMs on strided views of the fused [T, 3C] input (leading dimension 3C), nothing copied.
// Memory: the [N, heads, T, T] probabilities are not kept for backward (at T = 1024 they would
// outweigh every other activation); only each row's log-sum-exp [N, heads, T] is, and backward
// recomputes P = exp(S - lse) from S = q k^T / sqrt(hs) (flash-attention style: one extra
// T x T x hs GEMM per head). The queries go in blocks of 64 rows, each block multiplied with the
// keys and values up to its own last row, so most of the masked half is never computed; the
// only scratch is two 64 x T matrices for the current block, per thread: the (sample, head)
// pairs run on the rank's compute threads, each GEMM on its own (host_parallel).
// Decoding (start_decoding): each forward appends its rows' k and v to a cache ([positions, C]
// each, the fused input's column layout) and attends its q rows over the cache up to their own
// position, so a new token costs one row instead of the whole sequence. Inference only: no
// log-sum-exp is kept, so backward needs a training forward first.
#include <algorithm>
#include <cmath>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"
#include "nn/row_math.hpp"
#include "tensor/blas.hpp"
#include "tensor/host_parallel.hpp"

namespace ringtrain {
namespace {

// Softmax of row[0, valid) in place (the causally visible scores), zeros in row[valid, width);
// returns the log-sum-exp of the visible scores.
float softmax_prefix(float* row, std::int64_t valid, std::int64_t width) {
  float m = row[0];
  for (std::int64_t j = 1; j < valid; ++j) m = row[j] > m ? row[j] : m;
  float lane[rowmath::kLanes] = {};
  std::int64_t j = 0;
  for (; j + rowmath::kLanes <= valid; j += rowmath::kLanes)
    for (std::int64_t l = 0; l < rowmath::kLanes; ++l) {
      row[j + l] = rowmath::exp(row[j + l] - m);
      lane[l] += row[j + l];
    }
  float sum = 0.0f;
  for (const float p : lane) sum += p;
  for (; j < valid; ++j) {
    row[j] = rowmath::exp(row[j] - m);
    sum += row[j];
  }
  const float inv = 1.0f / sum;
  for (j = 0; j < valid; ++j) row[j] *= inv;
  for (; j < width; ++j) row[j] = 0.0f;
  return m + std::log(sum);
}

// Query rows per block of the training GEMMs: block [r0, r1) is multiplied with the keys and
// values [0, r1) only, so the masked part above the diagonal is mostly skipped (at T = 128 the
// GEMMs do 75% of the full T x T work). 64 rather than 32 (62.5%): with oneDNN's sgemm the
// larger GEMMs are the faster, the GPT example's step 1.017x (docs/benchmarks/2026-12-05-sgemm-onednn.md).
constexpr std::int64_t kRowBlock = 64;

}  // namespace

int CausalSelfAttention::pair_workers() { return blas::sgemm_in_parallel_loops() ? host_parallel::kAnyWorkers : 1; }

CausalSelfAttention::CausalSelfAttention(std::int64_t n_head) : heads_(n_head) {
  RT_REQUIRE(heads_ > 0, ConfigError, "attention: n_head must be > 0, got {}", heads_);
}

Shape CausalSelfAttention::configure(const Shape& input) {
  RT_REQUIRE(input.rank() == 2 && input[0] > 0 && input[1] > 0 && input[1] % 3 == 0, ConfigError,
             "attention: input per sample must be [T, 3C] (q | k | v from a linear with out = 3 n_embd), got {}",
             input.str());
  t_ = input[0];
  c_ = input[1] / 3;
  RT_REQUIRE(c_ % heads_ == 0, ConfigError, "attention: n_embd = {} (input {}) is not a multiple of n_head = {}", c_,
             input.str(), heads_);
  hs_ = c_ / heads_;
  return Shape{t_, c_};
}

// Two GEMMs of T x T x hs per head (scores, then P v) at 2 flops per multiply-add, counted over
// the full T x T although half of it is masked: 2 * 2 * T * T * hs * heads.
std::int64_t CausalSelfAttention::forward_flops_per_sample() const { return 4 * t_ * t_ * c_; }

void CausalSelfAttention::forward(const Tensor& x, Tensor& y, const StepInfo& info) {
  if (cache_rows_ > 0) {
    decode(x, y, info.position);
    return;
  }
  const std::int64_t n = x.shape()[0], t = t_, ld = 3 * c_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs_));
  const int workers = host_parallel::workers(n * heads_, pair_workers());
  s_.resize(static_cast<std::size_t>(workers * kRowBlock * t));
  lse_.resize(static_cast<std::size_t>(n * heads_ * t));
  host_parallel::for_each(
      n * heads_,
      [&](std::int64_t pair, int worker) {
        const std::int64_t b = pair / heads_, h = pair % heads_;
        float* s = s_.data() + worker * kRowBlock * t;
        const float* q = x.f32() + b * t * ld + h * hs_;
        const float* k = q + c_;
        const float* v = q + 2 * c_;
        float* out = y.f32() + b * t * c_ + h * hs_;
        float* lse = lse_.data() + (b * heads_ + h) * t;
        for (std::int64_t r0 = 0; r0 < t; r0 += kRowBlock) {  // rows [r0, r1) see columns [0, r1)
          const std::int64_t r1 = std::min(t, r0 + kRowBlock), rows = r1 - r0;
          blas::sgemm(false, true, rows, r1, hs_, scale, q + r0 * ld, ld, k, ld, 0.0f, s, r1);
          for (std::int64_t i = r0; i < r1; ++i) lse[i] = softmax_prefix(s + (i - r0) * r1, i + 1, r1);
          blas::sgemm(false, false, rows, hs_, r1, 1.0f, s, r1, v, ld, 0.0f, out + r0 * c_, c_);
        }
      },
      workers);
}

void CausalSelfAttention::start_decoding(std::int64_t max_positions) {
  RT_REQUIRE(max_positions >= 1, ConfigError, "attention: cannot decode {} positions", max_positions);
  cache_rows_ = max_positions;
  k_cache_.assign(static_cast<std::size_t>(max_positions * c_), 0.0f);
  v_cache_.assign(static_cast<std::size_t>(max_positions * c_), 0.0f);
}

// Rows r of x are positions p + r: their k and v go to cache rows p + r, then per head
// S = q K[0, p + rows)^T / sqrt(hs) (row r visible up to column p + r) and y = softmax(S) V.
void CausalSelfAttention::decode(const Tensor& x, Tensor& y, std::int64_t position) {
  const std::int64_t rows = x.shape()[0] * t_, ld = 3 * c_, span = position + rows;
  RT_REQUIRE(position >= 0 && span <= cache_rows_, Error,
             "attention: decoding positions [{}, {}) do not fit the KV cache of {} positions", position, span,
             cache_rows_);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs_));
  float* kc = k_cache_.data();
  float* vc = v_cache_.data();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* qkv = x.f32() + r * ld;
    std::copy_n(qkv + c_, c_, kc + (position + r) * c_);
    std::copy_n(qkv + 2 * c_, c_, vc + (position + r) * c_);
  }
  s_.resize(static_cast<std::size_t>(rows * span));
  float* s = s_.data();
  for (std::int64_t h = 0; h < heads_; ++h) {
    blas::sgemm(false, true, rows, span, hs_, scale, x.f32() + h * hs_, ld, kc + h * hs_, c_, 0.0f, s, span);
    for (std::int64_t r = 0; r < rows; ++r) softmax_prefix(s + r * span, position + r + 1, span);
    blas::sgemm(false, false, rows, hs_, span, 1.0f, s, span, vc + h * hs_, c_, 0.0f, y.f32() + h * hs_, c_);
  }
}

// With P recomputed: dV = P^T dY, dP = dY V^T, dS = P (dP - rowsum(P dP)), dQ = dS K scale,
// dK = dS^T Q scale (S being the scaled scores).
void CausalSelfAttention::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  if (dx == nullptr) return;  // no parameters
  const std::int64_t n = x.shape()[0], t = t_, ld = 3 * c_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs_));
  const int workers = host_parallel::workers(n * heads_, pair_workers());
  s_.resize(static_cast<std::size_t>(workers * kRowBlock * t));
  dp_.resize(static_cast<std::size_t>(workers * kRowBlock * t));
  const std::int64_t last_block = (t - 1) / kRowBlock * kRowBlock;
  host_parallel::for_each(
      n * heads_,
      [&](std::int64_t pair, int worker) {
        const std::int64_t b = pair / heads_, h = pair % heads_;
        float* p = s_.data() + worker * kRowBlock * t;
        float* dp = dp_.data() + worker * kRowBlock * t;
        const float* q = x.f32() + b * t * ld + h * hs_;
        const float* k = q + c_;
        const float* v = q + 2 * c_;
        const float* g = dy.f32() + b * t * c_ + h * hs_;
        float* dq = dx->f32() + b * t * ld + h * hs_;
        float* dk = dq + c_;
        float* dv = dq + 2 * c_;
        const float* lse = lse_.data() + (b * heads_ + h) * t;
        // Row blocks from the last, which sees every column and so writes all of dK and dV; the
        // earlier blocks add to their visible part.
        for (std::int64_t r0 = last_block; r0 >= 0; r0 -= kRowBlock) {
          const std::int64_t r1 = std::min(t, r0 + kRowBlock), rows = r1 - r0;
          const float beta = r1 == t ? 0.0f : 1.0f;
          blas::sgemm(false, true, rows, r1, hs_, scale, q + r0 * ld, ld, k, ld, 0.0f, p, r1);
          for (std::int64_t i = r0; i < r1; ++i) {
            float* row = p + (i - r0) * r1;
            const float l = lse[i];
            std::int64_t j = 0;
            for (; j <= i; ++j) row[j] = rowmath::exp(row[j] - l);
            for (; j < r1; ++j) row[j] = 0.0f;
          }
          blas::sgemm(true, false, r1, hs_, rows, 1.0f, p, r1, g + r0 * c_, c_, beta, dv, ld);
          blas::sgemm(false, true, rows, r1, hs_, 1.0f, g + r0 * c_, c_, v, ld, 0.0f, dp, r1);
          for (std::int64_t i = r0; i < r1; ++i) {
            const float* prow = p + (i - r0) * r1;
            float* drow = dp + (i - r0) * r1;
            const float d = rowmath::dot(prow, drow, i + 1);
            std::int64_t j = 0;
            for (; j <= i; ++j) drow[j] = prow[j] * (drow[j] - d);
            for (; j < r1; ++j) drow[j] = 0.0f;
          }
          blas::sgemm(false, false, rows, hs_, r1, scale, dp, r1, k, ld, 0.0f, dq + r0 * ld, ld);
          blas::sgemm(true, false, r1, hs_, rows, scale, dp, r1, q + r0 * ld, ld, beta, dk, ld);
        }
      },
      workers);
}

}  // namespace ringtrain
