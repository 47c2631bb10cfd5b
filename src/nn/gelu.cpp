// GELU, tanh approximation (the rule in ringtrain/nn/gelu_rule.hpp), with e = exp(-2|u|) from the
// polynomial exp of row_math.hpp, so both loops vectorise; spread over the rank's compute
// threads (host_parallel). Backward recomputes from x.
#include <cmath>

#include "ringtrain/nn/gelu_rule.hpp"
#include "ringtrain/nn/layers.hpp"
#include "nn/row_math.hpp"
#include "tensor/host_parallel.hpp"

namespace ringtrain {

void Gelu::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  const float* in = x.f32();
  float* out = y.f32();
  host_parallel::for_ranges(x.numel(), host_parallel::kElementGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float v = in[i];
      const float u = gelu_u(v);
      out[i] = gelu_value(v, u, rowmath::exp(-2.0f * std::fabs(u)));
    }
  });
}

void Gelu::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  if (dx == nullptr) return;
  const float* in = x.f32();
  const float* g = dy.f32();
  float* d = dx->f32();
  host_parallel::for_ranges(x.numel(), host_parallel::kElementGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float v = in[i];
      const float u = gelu_u(v);
      d[i] = g[i] * gelu_slope(v, u, rowmath::exp(-2.0f * std::fabs(u)));
    }
  });
}

}  // namespace ringtrain
