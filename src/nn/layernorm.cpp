// LayerNorm over the last dimension: each row (one token's C features) is handled start to end
// while it is in cache: forward takes mean and variance (two sums over the row, the second
// centred, so no cancellation) and writes y; backward takes its two sums, adds the row's share
// of the weight and bias gradients and writes dx. Mean and 1/std per row are kept for backward.
// Rows go in pieces over the rank's compute threads (host_parallel); the weight and bias
// gradients are summed per piece, then over the pieces in order, so they do not depend on the
// thread count.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"
#include "nn/row_math.hpp"
#include "tensor/host_parallel.hpp"

namespace ringtrain {
namespace {

// Rows per piece of the loops: host_parallel's, and at most 64 pieces, so that backward's
// per-piece gradient sums (2 C floats each) stay small.
std::int64_t rows_per_piece(std::int64_t rows, std::int64_t c) {
  constexpr std::int64_t kMaxPieces = 64;
  return std::max(host_parallel::rows_per_piece(c), (rows + kMaxPieces - 1) / kMaxPieces);
}

}  // namespace

LayerNorm::LayerNorm(double eps) : eps_(static_cast<float>(eps)) {
  RT_REQUIRE(eps > 0.0, ConfigError, "layernorm: eps must be > 0, got {}", eps);
}

Shape LayerNorm::configure(const Shape& input) {
  RT_REQUIRE(input.rank() >= 1 && input[input.rank() - 1] > 0, ConfigError,
             "layernorm: input per sample must have a last dimension, got {}", input.str());
  c_ = input[input.rank() - 1];
  return input;
}

std::vector<ParamSpec> LayerNorm::param_specs() const {
  return {{"weight", Shape{c_}, ParamInit::ones, 1}, {"bias", Shape{c_}, ParamInit::zeros, 1}};
}

void LayerNorm::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  gamma_ = params[0];
  beta_ = params[1];
  dgamma_ = grads[0];
  dbeta_ = grads[1];
}

void LayerNorm::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  const std::int64_t rows = x.numel() / c_;
  const float inv_c = 1.0f / static_cast<float>(c_);
  mean_.resize(static_cast<std::size_t>(rows));
  rstd_.resize(static_cast<std::size_t>(rows));
  const float* w = gamma_.f32();
  const float* b = beta_.f32();
  const float* x0 = x.f32();
  float* y0 = y.f32();
  host_parallel::for_ranges(rows, rows_per_piece(rows, c_), [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t r = first; r < last; ++r) {
      const float* in = x0 + r * c_;
      float* out = y0 + r * c_;
      const float mean = rowmath::sum(in, c_) * inv_c;
      const float var = rowmath::centered_sq_sum(in, mean, c_) * inv_c;
      const float rstd = 1.0f / std::sqrt(var + eps_);
      for (std::int64_t i = 0; i < c_; ++i) out[i] = (in[i] - mean) * rstd * w[i] + b[i];
      mean_[static_cast<std::size_t>(r)] = mean;
      rstd_[static_cast<std::size_t>(r)] = rstd;
    }
  });
}

// With xhat = (x - mean) rstd and g = dy * weight:
// dx = rstd (g - mean(g) - xhat mean(g xhat)), dweight = sum_rows dy xhat, dbias = sum_rows dy.
void LayerNorm::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  const std::int64_t rows = x.numel() / c_, per_piece = rows_per_piece(rows, c_);
  const std::int64_t pieces = (rows + per_piece - 1) / per_piece;
  const float inv_c = 1.0f / static_cast<float>(c_);
  const float* w = gamma_.f32();
  const float* x0 = x.f32();
  const float* g0 = dy.f32();
  float* dx0 = dx != nullptr ? dx->f32() : nullptr;
  // Each piece's share of dweight and dbias apart, summed in piece order below: the same
  // gradients on any number of threads. The scratch (at most 64 pieces x 2 C floats) is the
  // calling thread's, for every LayerNorm; workers reach it through `sums` (their own
  // thread_local would be another vector).
  thread_local std::vector<float> piece_sums;
  piece_sums.assign(static_cast<std::size_t>(pieces * 2 * c_), 0.0f);
  float* sums = piece_sums.data();
  host_parallel::for_ranges(rows, per_piece, [&](std::int64_t first, std::int64_t last) {
    float* dw = sums + first / per_piece * 2 * c_;
    float* db = dw + c_;
    for (std::int64_t r = first; r < last; ++r) {
      const float* in = x0 + r * c_;
      const float* g = g0 + r * c_;
      const float mean = mean_[static_cast<std::size_t>(r)];
      const float rstd = rstd_[static_cast<std::size_t>(r)];
      // The row's two sums, its share of dweight and dbias, then dx: three loops over the row
      // while it is in cache (one loop would need more alias checks than GCC versions for).
      float lane_g[rowmath::kLanes] = {}, lane_gx[rowmath::kLanes] = {};
      std::int64_t i = 0;
      for (; i + rowmath::kLanes <= c_; i += rowmath::kLanes)
        for (std::int64_t l = 0; l < rowmath::kLanes; ++l) {
          const float gw = g[i + l] * w[i + l];
          lane_g[l] += gw;
          lane_gx[l] += gw * (in[i + l] - mean);
        }
      float sum_g = 0.0f, sum_gx = 0.0f;
      for (std::int64_t l = 0; l < rowmath::kLanes; ++l) {
        sum_g += lane_g[l];
        sum_gx += lane_gx[l];
      }
      for (; i < c_; ++i) {
        sum_g += g[i] * w[i];
        sum_gx += g[i] * w[i] * (in[i] - mean);
      }
      const float mean_g = sum_g * inv_c, mean_gx = sum_gx * rstd * inv_c;
      for (std::int64_t j = 0; j < c_; ++j) {
        dw[j] += g[j] * ((in[j] - mean) * rstd);
        db[j] += g[j];
      }
      if (dx0 == nullptr) continue;
      float* d = dx0 + r * c_;
      for (std::int64_t j = 0; j < c_; ++j) d[j] = rstd * (g[j] * w[j] - mean_g - (in[j] - mean) * rstd * mean_gx);
    }
  });
  float* dw = dgamma_.f32();
  float* db = dbeta_.f32();
  std::memset(dw, 0, dgamma_.nbytes());
  std::memset(db, 0, dbeta_.nbytes());
  for (std::int64_t p = 0; p < pieces; ++p) {
    const float* piece = sums + p * 2 * c_;
    for (std::int64_t j = 0; j < c_; ++j) {
      dw[j] += piece[j];
      db[j] += piece[c_ + j];
    }
  }
}

}  // namespace ringtrain
