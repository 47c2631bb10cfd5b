// GELU, tanh approximation (the rule in ringtrain/nn/gelu_rule.hpp), with e = exp(-2|u|) from the
// polynomial exp of row_math.hpp, so both loops vectorise. Backward recomputes from x.
#include <cmath>

#include "ringtrain/nn/gelu_rule.hpp"
#include "ringtrain/nn/layers.hpp"
#include "nn/row_math.hpp"

namespace ringtrain {

void Gelu::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  const float* in = x.f32();
  float* out = y.f32();
  const std::int64_t n = x.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = in[i];
    const float u = gelu_u(v);
    out[i] = gelu_value(v, u, rowmath::exp(-2.0f * std::fabs(u)));
  }
}

void Gelu::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  if (dx == nullptr) return;
  const float* in = x.f32();
  const float* g = dy.f32();
  float* d = dx->f32();
  const std::int64_t n = x.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = in[i];
    const float u = gelu_u(v);
    d[i] = g[i] * gelu_slope(v, u, rowmath::exp(-2.0f * std::fabs(u)));
  }
}

}  // namespace ringtrain
