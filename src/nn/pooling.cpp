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

namespace {
// One output row of a 2x2 window with stride 2 over input rows r0 and r1 (r0 at `offset` in its
// plane): the same first-maximum rule as the general loop, as selects rather than branches, so
// the compiler can vectorize it; on real activations the branches mispredicted about half the time.
void pool_2x2_row(const float* r0, const float* r1, std::int64_t offset, std::int64_t w, std::int64_t ow, float* o,
                  std::int32_t* a) {
  for (std::int64_t ox = 0; ox < ow; ++ox) {
    const float v0 = r0[2 * ox], v1 = r0[2 * ox + 1], v2 = r1[2 * ox], v3 = r1[2 * ox + 1];
    const auto origin = static_cast<std::int32_t>(offset + 2 * ox);
    float best = v0;
    std::int32_t where = origin;
    const bool t1 = v1 > best;
    best = t1 ? v1 : best;
    where = t1 ? origin + 1 : where;
    const bool t2 = v2 > best;
    best = t2 ? v2 : best;
    where = t2 ? origin + static_cast<std::int32_t>(w) : where;
    const bool t3 = v3 > best;
    best = t3 ? v3 : best;
    where = t3 ? origin + static_cast<std::int32_t>(w) + 1 : where;
    o[ox] = best;
    a[ox] = where;
  }
}
}  // namespace

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
      if (k_ == 2 && s_ == 2) {
        for (std::int64_t oy = 0; oy < oh_; ++oy)
          pool_2x2_row(plane + 2 * oy * w_, plane + (2 * oy + 1) * w_, plane_offset + 2 * oy * w_, w_, ow_,
                       o + oy * ow_, a + oy * ow_);
        continue;
      }
      for (std::int64_t oy = 0; oy < oh_; ++oy)
        for (std::int64_t ox = 0; ox < ow_; ++ox) {
          const std::int64_t origin = (oy * s_) * w_ + ox * s_;
          float best = plane[origin];
          std::int64_t where = origin;
          for (std::int64_t i = 0; i < k_; ++i)
            for (std::int64_t j = 0; j < k_; ++j) {
              const std::int64_t off = origin + i * w_ + j;
              if (plane[off] > best) {
                best = plane[off];
                where = off;
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
