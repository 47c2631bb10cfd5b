// Conv2d (NCHW, square kernel, symmetric zero padding) as im2col + GEMM per sample: the
// columns of one sample stay in cache and outputs land in NCHW without a transposition.
#include <algorithm>
#include <cstring>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"
#include "nn/row_math.hpp"
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

// Lays out sample b's columns: row (c, ki, kj), column (oh, ow). With stride 1 each plane is
// first copied into a zero-bordered one, so every row of columns is a plain copy of one of its
// rows. Otherwise each output row splits into a zero left margin, a valid middle and a zero
// right margin, so there is no branch per element.
void Conv2d::im2col(const float* image, float* cols) {
  const std::int64_t k = o_.kernel, p = oh_ * ow_;
  if (o_.stride == 1) {
    const std::int64_t pad = o_.padding, wp = w_in_ + 2 * pad, hp = h_ + 2 * pad;
    padded_.assign(static_cast<std::size_t>(hp * wp), 0.0f);  // the border stays zero
    for (std::int64_t c = 0; c < c_; ++c) {
      const float* plane = image + c * h_ * w_in_;
      for (std::int64_t iy = 0; iy < h_; ++iy)
        std::copy(plane + iy * w_in_, plane + (iy + 1) * w_in_, padded_.data() + (iy + pad) * wp + pad);
      for (std::int64_t ki = 0; ki < k; ++ki)
        for (std::int64_t kj = 0; kj < k; ++kj) {
          float* row = cols + ((c * k + ki) * k + kj) * p;
          const float* src = padded_.data() + ki * wp + kj;
          for (std::int64_t oy = 0; oy < oh_; ++oy) std::copy(src + oy * wp, src + oy * wp + ow_, row + oy * ow_);
        }
    }
    return;
  }
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
          for (std::int64_t ox = span.begin; ox < span.end; ++ox) d[ox] = src[ox * o_.stride - shift];
          std::fill(d + span.end, d + ow_, 0.0f);
        }
      }
}

namespace {
// One input row's gradient d (w_in wide) from the K column rows of a stride-1 convolution (row kj
// at g + kj * p, output column ox reading input column ox - pad + kj): each element adds its K
// terms in kj order in one pass. Passes per kj would reread what the previous one just stored at a
// one-element shift, which stalls on store forwarding.
template <int K>
void col2im_row_stride1(const float* g, std::int64_t p, std::int64_t pad, std::int64_t w_in, std::int64_t ow,
                        float* d) {
  const std::int64_t lo = std::min(w_in, std::max<std::int64_t>(0, K - 1 - pad));  // from here every kj reads
  const std::int64_t hi = std::max(lo, std::min(w_in, ow - pad));                  // up to here
  const auto edge = [&](std::int64_t ix) {
    float acc = d[ix];
    for (int kj = 0; kj < K; ++kj) {
      const std::int64_t ox = ix + pad - kj;
      if (ox >= 0 && ox < ow) acc += g[kj * p + ox];
    }
    d[ix] = acc;
  };
  for (std::int64_t ix = 0; ix < lo; ++ix) edge(ix);
  for (std::int64_t ix = lo; ix < hi; ++ix) {
    float acc = d[ix];
    for (int kj = 0; kj < K; ++kj) acc += g[kj * p + ix + pad - kj];
    d[ix] = acc;
  }
  for (std::int64_t ix = hi; ix < w_in; ++ix) edge(ix);
}
}  // namespace

// Scatter-adds sample b's column gradients back onto its (zeroed) input gradient, one input row
// at a time: the k column rows (kj) of each (c, ki, oy) add to the row while it is in L1. Every
// element receives its terms in (ki, kj) order, whichever path adds them.
void Conv2d::col2im(const float* cols, float* image) const {
  const std::int64_t k = o_.kernel, p = oh_ * ow_;
  std::fill(image, image + c_ * h_ * w_in_, 0.0f);
  for (std::int64_t c = 0; c < c_; ++c)
    for (std::int64_t ki = 0; ki < k; ++ki) {
      const float* rows = cols + (c * k + ki) * k * p;  // the k rows (kj) of (c, ki)
      float* plane = image + c * h_ * w_in_;
      for (std::int64_t oy = 0; oy < oh_; ++oy) {
        const std::int64_t iy = oy * o_.stride - o_.padding + ki;
        if (iy < 0 || iy >= h_) continue;
        float* d = plane + iy * w_in_;
        if (o_.stride == 1 && k == 3) {
          col2im_row_stride1<3>(rows + oy * ow_, p, o_.padding, w_in_, ow_, d);
          continue;
        }
        for (std::int64_t kj = 0; kj < k; ++kj) {
          const float* g = rows + kj * p + oy * ow_;
          const Span span = valid_span(kj);
          const std::int64_t shift = o_.padding - kj;
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
    for (std::int64_t j = 0; j < f; ++j) db[static_cast<std::size_t>(j)] += rowmath::sum(gb + j * p, p);
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
