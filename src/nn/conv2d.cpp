// Conv2d (NCHW, square kernel, symmetric zero padding) as im2col + GEMM per sample: the
// columns of one sample stay in cache and outputs land in NCHW without a transposition.
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

namespace {
// Sum with eight independent accumulators: vectorizes, and avoids one long dependency chain.
float sum(const float* v, std::int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += v[i + l];
  for (; i < n; ++i) acc[0] += v[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}
}  // namespace

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

// Lays out sample b's columns: row (c, ki, kj), column (oh, ow). Each output row splits
// into a zero left margin, a valid middle (a contiguous copy when stride is 1) and a zero
// right margin, so there is no branch per element.
void Conv2d::im2col(const float* image, float* cols) const {
  const std::int64_t k = o_.kernel, p = oh_ * ow_;
  for (std::int64_t c = 0; c < c_; ++c)
    for (std::int64_t ki = 0; ki < k; ++ki)
      for (std::int64_t kj = 0; kj < k; ++kj) {
        float* row = cols + ((c * k + ki) * k + kj) * p;
        const float* plane = image + c * h_ * w_in_;
        const Span span = valid_span(kj);
        const std::int64_t shift = o_.padding - kj;  // column ox reads input column ox * stride - shift
        for (std::int64_t oy = 0; oy < oh_; ++oy) {
          const std::int64_t iy = oy * o_.stride - o_.padding + ki;
          float* d = row + oy * ow_;
          if (iy < 0 || iy >= h_) {
            std::fill(d, d + ow_, 0.0f);
            continue;
          }
          const float* src = plane + iy * w_in_;
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

// Scatter-adds sample b's column gradients back onto its (zeroed) input gradient.
void Conv2d::col2im(const float* cols, float* image) const {
  const std::int64_t k = o_.kernel, p = oh_ * ow_;
  std::fill(image, image + c_ * h_ * w_in_, 0.0f);
  for (std::int64_t c = 0; c < c_; ++c)
    for (std::int64_t ki = 0; ki < k; ++ki)
      for (std::int64_t kj = 0; kj < k; ++kj) {
        const float* row = cols + ((c * k + ki) * k + kj) * p;
        float* plane = image + c * h_ * w_in_;
        const Span span = valid_span(kj);
        const std::int64_t shift = o_.padding - kj;
        for (std::int64_t oy = 0; oy < oh_; ++oy) {
          const std::int64_t iy = oy * o_.stride - o_.padding + ki;
          if (iy < 0 || iy >= h_) continue;
          float* d = plane + iy * w_in_;
          const float* g = row + oy * ow_;
          if (o_.stride == 1) {
            for (std::int64_t ox = span.begin; ox < span.end; ++ox) d[ox - shift] += g[ox];
          } else {
            for (std::int64_t ox = span.begin; ox < span.end; ++ox) d[ox * o_.stride - shift] += g[ox];
          }
        }
      }
}

// Per sample: columns (kept for backward), then one GEMM straight into y's NCHW block. A
// sample's columns (C*k*k x OH*OW) fit in L2, and no layout transposition is needed; the
// GEMMs run as fast as one batch-wide GEMM would for these shapes (measured).
void Conv2d::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  const std::int64_t n = x.shape()[0], p = oh_ * ow_, kk = c_ * o_.kernel * o_.kernel;
  const std::int64_t f = o_.out_channels;
  cols_.resize(static_cast<std::size_t>(n * kk * p));
  const float* in = x.f32();
  float* out = y.f32();
  for (std::int64_t b = 0; b < n; ++b) {
    float* cols = cols_.data() + b * kk * p;
    float* yb = out + b * f * p;
    im2col(in + b * c_ * h_ * w_in_, cols);
    if (o_.bias)
      for (std::int64_t j = 0; j < f; ++j) std::fill(yb + j * p, yb + (j + 1) * p, b_.f32()[j]);
    blas::sgemm(false, false, f, p, kk, 1.0f, w_.f32(), kk, cols, p, o_.bias ? 1.0f : 0.0f, yb, p);
  }
}

void Conv2d::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  const std::int64_t n = x.shape()[0], p = oh_ * ow_, kk = c_ * o_.kernel * o_.kernel;
  const std::int64_t f = o_.out_channels;
  const float* g = dy.f32();
  std::vector<double>& db = bias_sums_;
  db.assign(static_cast<std::size_t>(f), 0.0);
  if (dx != nullptr) dcols_.resize(static_cast<std::size_t>(kk * p));
  for (std::int64_t b = 0; b < n; ++b) {
    const float* gb = g + b * f * p;
    const float* cols = cols_.data() + b * kk * p;
    blas::sgemm(false, true, f, kk, p, 1.0f, gb, p, cols, p, b == 0 ? 0.0f : 1.0f, dw_.f32(), kk);
    for (std::int64_t j = 0; j < f; ++j) db[static_cast<std::size_t>(j)] += sum(gb + j * p, p);
    if (dx != nullptr) {
      blas::sgemm(true, false, kk, p, f, 1.0f, w_.f32(), kk, gb, p, 0.0f, dcols_.data(), p);
      col2im(dcols_.data(), dx->f32() + b * c_ * h_ * w_in_);
    }
  }
  if (n == 0) std::fill(dw_.f32(), dw_.f32() + f * kk, 0.0f);
  if (o_.bias)
    for (std::int64_t j = 0; j < f; ++j) db_.f32()[j] = static_cast<float>(db[static_cast<std::size_t>(j)]);
}

}  // namespace ringtrain
