// GELU, tanh approximation, computed as x * sigmoid(2u) with u = sqrt(2/pi) (x + 0.044715 x^3)
// (equal to 0.5 x (1 + tanh u), without cancellation for large negative u), through the
// polynomial exp of row_math.hpp so both loops vectorise. Backward recomputes from x.
#include "ringtrain/nn/layers.hpp"
#include "nn/row_math.hpp"

namespace ringtrain {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

}  // namespace

void Gelu::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  const float* in = x.f32();
  float* out = y.f32();
  const std::int64_t n = x.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = in[i];
    const float u = kSqrt2OverPi * (v + kCubic * v * v * v);
    out[i] = v / (1.0f + rowmath::exp(-2.0f * u));
  }
}

// d/dx [x s(2u)] = s + x s (1 - s) 2 u', with s = 1 / (1 + e), 1 - s = e s, e = exp(-2u).
void Gelu::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  if (dx == nullptr) return;
  const float* in = x.f32();
  const float* g = dy.f32();
  float* d = dx->f32();
  const std::int64_t n = x.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = in[i];
    const float u = kSqrt2OverPi * (v + kCubic * v * v * v);
    const float e = rowmath::exp(-2.0f * u);
    const float s = 1.0f / (1.0f + e);
    const float du = 2.0f * kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
    d[i] = g[i] * (s + v * s * (e * s) * du);
  }
}

}  // namespace ringtrain
