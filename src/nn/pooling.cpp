// MaxPool2d (no padding): remembers the arg-max of every window for backward. Ties pick the
// first maximum in row-major window order, as PyTorch does.
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain {

MaxPool2d::MaxPool2d(std::int64_t kernel, std::int64_t stride) : k_(kernel), s_(stride) {
  RT_REQUIRE(k_ > 0 && s_ > 0, ConfigError, "maxpool2d: kernel and stride must be > 0 (got {}, {})", k_, s_);
}

Shape MaxPool2d::configure(const Shape& input) {
  RT_REQUIRE(input.rank() == 3, ConfigError, "maxpool2d: input per sample must be [C, H, W], got {}", input.str());
  c_ = input[0];
  h_ = input[1];
  w_ = input[2];
  oh_ = (h_ - k_) / s_ + 1;
  ow_ = (w_ - k_) / s_ + 1;
  RT_REQUIRE(h_ >= k_ && w_ >= k_, ConfigError, "maxpool2d: kernel {} larger than input {}", k_, input.str());
  return Shape{c_, oh_, ow_};
}

void MaxPool2d::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  const std::int64_t n = x.shape()[0], in_sample = c_ * h_ * w_, out_sample = c_ * oh_ * ow_;
  argmax_.resize(static_cast<std::size_t>(n * out_sample));
  const float* in = x.f32();
  float* out = y.f32();
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t c = 0; c < c_; ++c) {
      const std::int64_t plane_offset = c * h_ * w_;
      const float* plane = in + b * in_sample + plane_offset;
      float* o = out + b * out_sample + c * oh_ * ow_;
      std::int32_t* a = argmax_.data() + b * out_sample + c * oh_ * ow_;
      for (std::int64_t oy = 0; oy < oh_; ++oy)
        for (std::int64_t ox = 0; ox < ow_; ++ox) {
          const std::int64_t origin = (oy * s_) * w_ + ox * s_;
          float best = plane[origin];
          std::int64_t where = origin;
          if (k_ == 2) {  // the common case, unrolled (same first-maximum rule)
            const std::int64_t cand[3] = {origin + 1, origin + w_, origin + w_ + 1};
            for (std::int64_t off : cand)
              if (plane[off] > best) {
                best = plane[off];
                where = off;
              }
          } else {
            for (std::int64_t i = 0; i < k_; ++i)
              for (std::int64_t j = 0; j < k_; ++j) {
                const std::int64_t off = origin + i * w_ + j;
                if (plane[off] > best) {
                  best = plane[off];
                  where = off;
                }
              }
          }
          o[oy * ow_ + ox] = best;
          a[oy * ow_ + ox] = static_cast<std::int32_t>(plane_offset + where);
        }
    }
}

void MaxPool2d::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  if (dx == nullptr) return;
  const std::int64_t n = x.shape()[0], in_sample = c_ * h_ * w_, out_sample = c_ * oh_ * ow_;
  float* d = dx->f32();
  std::fill(d, d + n * in_sample, 0.0f);
  const float* g = dy.f32();
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t o = 0; o < out_sample; ++o)
      d[b * in_sample + argmax_[static_cast<std::size_t>(b * out_sample + o)]] += g[b * out_sample + o];
}

}  // namespace ringtrain
