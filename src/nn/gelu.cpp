// GELU, tanh approximation, computed as x * sigmoid(2u) with u = sqrt(2/pi) (x + 0.044715 x^3)
// (equal to 0.5 x (1 + tanh u), without cancellation for large negative u) from exp(-2|u|), the
// polynomial exp of row_math.hpp, so both loops vectorise. Backward recomputes from x.
#include <cmath>

#include "ringtrain/nn/layers.hpp"
#include "nn/row_math.hpp"

namespace ringtrain {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

}  // namespace

// With e = exp(-2|u|) in (0, 1]: sigmoid(2u) = 1 / (1 + e) for u >= 0, e / (1 + e) for u < 0.
void Gelu::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  const float* in = x.f32();
  float* out = y.f32();
  const std::int64_t n = x.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = in[i];
    const float u = kSqrt2OverPi * (v + kCubic * v * v * v);
    const float e = rowmath::exp(-2.0f * std::fabs(u));
    out[i] = v * (u >= 0.0f ? 1.0f : e) / (1.0f + e);
  }
}

// d/dx [x s(2u)] = s + x s (1 - s) 2 u', and s (1 - s) = e / (1 + e)^2 for either sign of u.
void Gelu::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  if (dx == nullptr) return;
  const float* in = x.f32();
  const float* g = dy.f32();
  float* d = dx->f32();
  const std::int64_t n = x.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = in[i];
    const float u = kSqrt2OverPi * (v + kCubic * v * v * v);
    const float e = rowmath::exp(-2.0f * std::fabs(u));
    const float inv = 1.0f / (1.0f + e);
    const float s = (u >= 0.0f ? 1.0f : e) * inv;
    const float du = 2.0f * kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
    d[i] = g[i] * (s + v * (e * inv * inv) * du);
  }
}

}  // namespace ringtrain
