// Conv2d (NCHW, square kernel, symmetric zero padding) as im2col + one GEMM over the whole
// batch: cols [C*k*k, N*OH*OW], out [F, N*OH*OW]. A batch-wide GEMM keeps OpenBLAS efficient
// where per-sample GEMMs (N = OH*OW = 196) would not be.
#include <algorithm>
#include <cstring>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"
#include "tensor/blas.hpp"

namespace ringtrain {

Conv2d::Conv2d(const Conv2dOptions& o) : o_(o) {
  RT_REQUIRE(o.out_channels > 0, ConfigError, "conv2d: out_channels must be > 0, got {}", o.out_channels);
  RT_REQUIRE(o.kernel > 0, ConfigError, "conv2d: kernel must be > 0, got {}", o.kernel);
  RT_REQUIRE(o.stride > 0, ConfigError, "conv2d: stride must be > 0, got {}", o.stride);
  RT_REQUIRE(o.padding >= 0, ConfigError, "conv2d: padding must be >= 0, got {}", o.padding);
}

Shape Conv2d::configure(const Shape& input) {
  RT_REQUIRE(input.rank() == 3, ConfigError, "conv2d: input per sample must be [C, H, W], got {}", input.str());
  c_ = input[0];
  h_ = input[1];
  w_in_ = input[2];
  oh_ = (h_ + 2 * o_.padding - o_.kernel) / o_.stride + 1;
  ow_ = (w_in_ + 2 * o_.padding - o_.kernel) / o_.stride + 1;
  RT_REQUIRE(oh_ > 0 && ow_ > 0, ConfigError, "conv2d: kernel {} does not fit input {} with padding {}", o_.kernel,
             input.str(), o_.padding);
  return Shape{o_.out_channels, oh_, ow_};
}

std::vector<ParamSpec> Conv2d::param_specs() const {
  const std::int64_t fan_in = c_ * o_.kernel * o_.kernel;
  std::vector<ParamSpec> specs{
      {"weight", Shape{o_.out_channels, c_, o_.kernel, o_.kernel}, ParamInit::uniform_fan_in, fan_in}};
  if (o_.bias) specs.push_back({"bias", Shape{o_.out_channels}, ParamInit::uniform_fan_in, fan_in});
  return specs;
}

void Conv2d::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  w_ = params[0];
  dw_ = grads[0];
  if (o_.bias) {
    b_ = params[1];
    db_ = grads[1];
  }
}

// Output columns ox whose input column ox * stride - padding + kj lies inside the image.
Conv2d::Span Conv2d::valid_span(std::int64_t kj) const {
  const std::int64_t shift = o_.padding - kj;  // ix = ox * stride - shift
  std::int64_t begin = shift > 0 ? (shift + o_.stride - 1) / o_.stride : 0;
  std::int64_t end = (w_in_ - 1 + shift) / o_.stride + 1;  // first ox with ix >= w_in
  if (w_in_ - 1 + shift < 0) end = 0;
  begin = std::min(begin, ow_);
  end = std::clamp(end, begin, ow_);
  return Span{begin, end};
}

std::int64_t Conv2d::forward_flops_per_sample() const {
  return 2 * o_.out_channels * c_ * o_.kernel * o_.kernel * oh_ * ow_;
}

void Conv2d::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  const std::int64_t n = x.shape()[0], k = o_.kernel, p = oh_ * ow_, np = n * p, kk = c_ * k * k;
  const std::int64_t f = o_.out_channels;
  cols_.resize(static_cast<std::size_t>(kk * np));
  gemm_out_.resize(static_cast<std::size_t>(f * np));
  const float* in = x.f32();
  // im2col: row (c, ki, kj), column (n, oh, ow). Each output row splits into a zero
  // left margin, a valid middle (a contiguous copy when stride is 1) and a zero right margin.
  for (std::int64_t c = 0; c < c_; ++c)
    for (std::int64_t ki = 0; ki < k; ++ki)
      for (std::int64_t kj = 0; kj < k; ++kj) {
        float* row = cols_.data() + ((c * k + ki) * k + kj) * np;
        const Span span = valid_span(kj);
        for (std::int64_t b = 0; b < n; ++b) {
          const float* plane = in + (b * c_ + c) * h_ * w_in_;
          float* dst = row + b * p;
          for (std::int64_t oy = 0; oy < oh_; ++oy) {
            const std::int64_t iy = oy * o_.stride - o_.padding + ki;
            float* d = dst + oy * ow_;
            if (iy < 0 || iy >= h_) {
              std::fill(d, d + ow_, 0.0f);
              continue;
            }
            const float* src = plane + iy * w_in_;  // column ox reads src[ox * stride - shift]
            const std::int64_t shift = o_.padding - kj;
            std::fill(d, d + span.begin, 0.0f);
            if (o_.stride == 1) {
              std::copy(src + span.begin - shift, src + span.end - shift, d + span.begin);
            } else {
              for (std::int64_t ox = span.begin; ox < span.end; ++ox) d[ox] = src[ox * o_.stride - shift];
            }
            std::fill(d + span.end, d + ow_, 0.0f);
          }
        }
      }
  blas::sgemm(false, false, f, np, kk, 1.0f, w_.f32(), kk, cols_.data(), np, 0.0f, gemm_out_.data(), np);
  float* out = y.f32();
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t j = 0; j < f; ++j) {
      const float bias = o_.bias ? b_.f32()[j] : 0.0f;
      const float* src = gemm_out_.data() + j * np + b * p;
      float* dst = out + (b * f + j) * p;
      for (std::int64_t q = 0; q < p; ++q) dst[q] = src[q] + bias;
    }
}

void Conv2d::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  const std::int64_t n = x.shape()[0], k = o_.kernel, p = oh_ * ow_, np = n * p, kk = c_ * k * k;
  const std::int64_t f = o_.out_channels;
  // dy [N, F, P] -> channel-major [F, N*P] (reusing the forward output buffer); the bias
  // gradient is summed on the way, while the rows are in cache.
  const float* g = dy.f32();
  std::vector<double>& db = bias_sums_;
  db.assign(static_cast<std::size_t>(f), 0.0);
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t j = 0; j < f; ++j) {
      const float* src = g + (b * f + j) * p;
      float* dst = gemm_out_.data() + j * np + b * p;
      float row_sum = 0.0f;
      for (std::int64_t q = 0; q < p; ++q) {
        dst[q] = src[q];
        row_sum += src[q];
      }
      db[static_cast<std::size_t>(j)] += row_sum;
    }
  if (o_.bias)
    for (std::int64_t j = 0; j < f; ++j) db_.f32()[j] = static_cast<float>(db[static_cast<std::size_t>(j)]);
  blas::sgemm(false, true, f, kk, np, 1.0f, gemm_out_.data(), np, cols_.data(), np, 0.0f, dw_.f32(), kk);
  if (dx == nullptr) return;
  dcols_.resize(static_cast<std::size_t>(kk * np));
  blas::sgemm(true, false, kk, np, f, 1.0f, w_.f32(), kk, gemm_out_.data(), np, 0.0f, dcols_.data(), np);
  // col2im: scatter-add the column gradients back to the input positions (valid spans only).
  float* out = dx->f32();
  std::memset(out, 0, dx->nbytes());
  for (std::int64_t c = 0; c < c_; ++c)
    for (std::int64_t ki = 0; ki < k; ++ki)
      for (std::int64_t kj = 0; kj < k; ++kj) {
        const float* row = dcols_.data() + ((c * k + ki) * k + kj) * np;
        const Span span = valid_span(kj);
        for (std::int64_t b = 0; b < n; ++b) {
          float* plane = out + (b * c_ + c) * h_ * w_in_;
          const float* src = row + b * p;
          for (std::int64_t oy = 0; oy < oh_; ++oy) {
            const std::int64_t iy = oy * o_.stride - o_.padding + ki;
            if (iy < 0 || iy >= h_) continue;
            float* d = plane + iy * w_in_;
            const float* g = src + oy * ow_;
            const std::int64_t shift = o_.padding - kj;
            for (std::int64_t ox = span.begin; ox < span.end; ++ox) d[ox * o_.stride - shift] += g[ox];
          }
        }
      }
}

}  // namespace ringtrain
