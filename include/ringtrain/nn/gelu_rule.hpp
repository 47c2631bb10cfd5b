// The GELU rule (tanh form) shared by the CPU layer (src/nn/gelu.cpp) and the CUDA kernel
// (kernels/activation_kernels.cu): y = x sigmoid(2u) with u = sqrt(2/pi) (x + 0.044715 x^3),
// equal to 0.5 x (1 + tanh u) without its cancellation for large negative u. Each side passes
// e = exp(-2|u|) from its own exp (a vectorisable polynomial on the CPU, expf on the GPU).
// Host-only header (RT_HOST_DEVICE as in update_rules.hpp).
#pragma once
#include "ringtrain/optim/update_rules.hpp"

namespace ringtrain {

inline constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
inline constexpr float kGeluCubic = 0.044715f;

RT_HOST_DEVICE inline float gelu_u(float x) { return kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x); }

// With e = exp(-2|u|) in (0, 1]: sigmoid(2u) = 1 / (1 + e) for u >= 0, e / (1 + e) for u < 0.
RT_HOST_DEVICE inline float gelu_value(float x, float u, float e) { return x * (u >= 0.0f ? 1.0f : e) / (1.0f + e); }

// dy/dx = s + x s (1 - s) 2 u', with s = sigmoid(2u) and s (1 - s) = e / (1 + e)^2 for either sign of u.
RT_HOST_DEVICE inline float gelu_slope(float x, float u, float e) {
  const float inv = 1.0f / (1.0f + e);
  const float s = (u >= 0.0f ? 1.0f : e) * inv;
  const float du = 2.0f * kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return s + x * (e * inv * inv) * du;
}

}  // namespace ringtrain
