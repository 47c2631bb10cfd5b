// Host launchers for bias + activation forward, ReLU and GELU forward/backward and the bias gradient
// (activation_kernels.cu). Tensors are f32, bf16 or f16 (computed in float); a bias is f32 or
// the values' dtype, its gradient f32. The stream is an opaque cudaStream_t; launches are checked.
#pragma once
#include <cstdint>

#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain::kernels {

enum class Activation { none, relu };

// y viewed as [outer][channels][inner], in place: y = act(y + bias[c]), the sum in float; bias
// (device, bias_dtype: f32 or dtype, else Error) may be null. With no bias and no activation
// nothing is launched.
void launch_bias_act_forward(void* y, const void* bias, DType bias_dtype, std::int64_t outer, std::int64_t channels,
                             std::int64_t inner, Activation act, DType dtype, void* stream);

// y = x <= 0 ? 0 : x (a NaN passes) over n elements (y may alias x).
void launch_relu_forward(void* y, const void* x, std::int64_t n, DType dtype, void* stream);

// dx = y > 0 ? dy : 0 over n elements (dx may alias dy).
void launch_relu_backward(void* dx, const void* y, const void* dy, std::int64_t n, DType dtype, void* stream);

// y = gelu(x), the tanh form of ringtrain/nn/gelu_rule.hpp, over n elements (y may alias x).
void launch_gelu_forward(void* y, const void* x, std::int64_t n, DType dtype, void* stream);

// dx = dy * gelu'(x) over n elements (dx may alias dy, not x).
void launch_gelu_backward(void* dx, const void* x, const void* dy, std::int64_t n, DType dtype, void* stream);

// db[c] = sum over outer, inner of dy[o][c][i]: f32 accumulation in a fixed order (no atomics),
// so repeated runs give the same bits; inner == 1 (a Linear's [rows][channels]) reads rows
// coalesced, 32 channels by 8 row phases per block. Overwrites db; with outer * inner == 0 it is
// set to zeros.
void launch_bias_grad(float* db, const void* dy, std::int64_t outer, std::int64_t channels, std::int64_t inner,
                      DType dtype, void* stream);

}  // namespace ringtrain::kernels
