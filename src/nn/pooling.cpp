// MaxPool2d (no padding): remembers the arg-max of every window for backward. Ties pick the
// first maximum in row-major window order, as PyTorch does. With an absorbed ReLU before it, it
// pools the values before the ReLU and applies the ReLU to the (four times fewer) pooled ones.
// Each sample is a piece of work on the rank's compute threads.
#include <algorithm>
#include <cstring>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"
#include "tensor/host_parallel.hpp"

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

bool MaxPool2d::absorb_producer(const Layer& producer) {
  relu_first_ = ReLU::is_cpu_relu(producer);
  return relu_first_;
}

namespace {
// The 2x2 stride-2 windows, eight at a time in portable vector types (GCC and clang): the same
// first-maximum rule as the general loop, as selects. Rows are short (14 or 7 windows in the
// CNN), which left a compiler's own vectorization of the row loop mostly in its scalar remainder.
using Floats8 = float __attribute__((vector_size(32)));
using Ints8 = std::int32_t __attribute__((vector_size(32)));

// Windows over r0[0, 16) and r1[0, 16); origin: the sample offset of r0[0]; w: the row length.
void pool_2x2_eight(const float* r0, const float* r1, std::int32_t origin, std::int32_t w, float* o, std::int32_t* a) {
  Floats8 r0_lo, r0_hi, r1_lo, r1_hi;
  std::memcpy(&r0_lo, r0, sizeof(Floats8));
  std::memcpy(&r0_hi, r0 + 8, sizeof(Floats8));
  std::memcpy(&r1_lo, r1, sizeof(Floats8));
  std::memcpy(&r1_hi, r1 + 8, sizeof(Floats8));
  const Floats8 v0 = __builtin_shufflevector(r0_lo, r0_hi, 0, 2, 4, 6, 8, 10, 12, 14);
  const Floats8 v1 = __builtin_shufflevector(r0_lo, r0_hi, 1, 3, 5, 7, 9, 11, 13, 15);
  const Floats8 v2 = __builtin_shufflevector(r1_lo, r1_hi, 0, 2, 4, 6, 8, 10, 12, 14);
  const Floats8 v3 = __builtin_shufflevector(r1_lo, r1_hi, 1, 3, 5, 7, 9, 11, 13, 15);
  const Ints8 at = origin + Ints8{0, 2, 4, 6, 8, 10, 12, 14};
  Floats8 best = v0;
  Ints8 where = at;
  Ints8 greater = v1 > best;
  best = greater ? v1 : best;
  where = greater ? at + 1 : where;
  greater = v2 > best;
  best = greater ? v2 : best;
  where = greater ? at + w : where;
  greater = v3 > best;
  best = greater ? v3 : best;
  where = greater ? at + w + 1 : where;
  std::memcpy(o, &best, sizeof(Floats8));
  std::memcpy(a, &where, sizeof(Floats8));
}

// One output row over input rows r0 and r1 (r0 at `offset` in its sample); the last partial
// group of eight goes through a zero-padded copy, so nothing past the rows is read.
void pool_2x2_row(const float* r0, const float* r1, std::int64_t offset, std::int64_t w, std::int64_t ow, float* o,
                  std::int32_t* a) {
  std::int64_t ox = 0;
  const auto at = [&](std::int64_t x) { return static_cast<std::int32_t>(offset + 2 * x); };
  for (; ox + 8 <= ow; ox += 8)
    pool_2x2_eight(r0 + 2 * ox, r1 + 2 * ox, at(ox), static_cast<std::int32_t>(w), o + ox, a + ox);
  const std::int64_t left = ow - ox;
  if (left == 0) return;
  float p0[16] = {}, p1[16] = {}, po[8];
  std::int32_t pa[8];
  std::memcpy(p0, r0 + 2 * ox, static_cast<std::size_t>(2 * left) * sizeof(float));
  std::memcpy(p1, r1 + 2 * ox, static_cast<std::size_t>(2 * left) * sizeof(float));
  pool_2x2_eight(p0, p1, at(ox), static_cast<std::int32_t>(w), po, pa);
  std::memcpy(o + ox, po, static_cast<std::size_t>(left) * sizeof(float));
  std::memcpy(a + ox, pa, static_cast<std::size_t>(left) * sizeof(std::int32_t));
}
}  // namespace

void MaxPool2d::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  const std::int64_t n = x.shape()[0], in_sample = c_ * h_ * w_, out_sample = c_ * oh_ * ow_;
  argmax_.resize(static_cast<std::size_t>(n * out_sample));
  const float* in = x.f32();
  float* out = y.f32();
  host_parallel::for_each(n, [&](std::int64_t b, int) {
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
    // ReLU's own rule (-0 becomes +0, NaN passes); NaN-free inputs give the separate layers' bits
    if (relu_first_) ReLU::apply(out + b * out_sample, out + b * out_sample, out_sample);
  });
}

// Each sample's input gradient is zeroed just before its windows add to it, while it is in cache.
// With an absorbed ReLU a window passes its gradient only when its (pooled, ReLU'd) output is
// positive: then its arg-max input was positive too, so the ReLU would have passed it; every
// window sharing that arg-max decides alike, so the sums are the separate layers' bit for bit.
void MaxPool2d::backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) {
  if (dx == nullptr) return;
  const std::int64_t n = x.shape()[0], in_sample = c_ * h_ * w_, out_sample = c_ * oh_ * ow_;
  const float* g = dy.f32();
  const float* out = y.f32();
  host_parallel::for_each(n, [&](std::int64_t b, int) {
    float* d = dx->f32() + b * in_sample;
    std::fill(d, d + in_sample, 0.0f);
    const std::int32_t* a = argmax_.data() + b * out_sample;
    const float* gb = g + b * out_sample;
    if (!relu_first_) {
      for (std::int64_t o = 0; o < out_sample; ++o) d[a[o]] += gb[o];
      return;
    }
    const float* yb = out + b * out_sample;
    for (std::int64_t o = 0; o < out_sample; ++o)
      if (yb[o] > 0.0f) d[a[o]] += gb[o];
  });
}

}  // namespace ringtrain
