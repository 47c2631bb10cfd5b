// The small models the CUDA model and step tests train (an MLP with a dropout layer of p = 0,
// a CNN with batch norm) on [1, 12, 12] inputs, and binding this process to its GPU.
#pragma once
#include "ringtrain/runtime/context.hpp"
#include "ringtrain/tensor/tensor.hpp"
#include "support/test_context.hpp"

namespace ringtrain::test {

inline constexpr const char* kMlp = R"(
[[layers]]
type = "flatten"
[[layers]]
type = "linear"
out = 64
[[layers]]
type = "relu"
[[layers]]
type = "dropout"
p = 0.0
[[layers]]
type = "linear"
out = 10
)";

inline constexpr const char* kCnn = R"(
[[layers]]
type = "conv2d"
out_channels = 8
kernel = 3
padding = 1
bias = false  # batch norm follows: a bias gradient would be zero up to rounding noise
[[layers]]
type = "batchnorm2d"
[[layers]]
type = "relu"
[[layers]]
type = "maxpool2d"
kernel = 2
[[layers]]
type = "flatten"
[[layers]]
type = "linear"
out = 10
)";

inline const Shape kInput{1, 12, 12};

// Binds the shared test Context to a GPU; false (the caller skips) where there is none.
inline bool bind_gpu() {
  Context& ctx = context();
  ctx.bind(Device::cuda, 1);
  return ctx.binding().backend == Device::cuda;
}

}  // namespace ringtrain::test
