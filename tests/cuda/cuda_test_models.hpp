// The small models the CUDA model and step tests train (an MLP with a dropout layer of p = 0,
// one with two hidden layers, a CNN with batch norm, a residual CNN) on [1, 12, 12] inputs, a GPT on token windows, and
// binding this process to its GPU.
#pragma once
#include <cstdint>

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

// Two hidden layers, each Linear + ReLU: the second Linear applies the first one's ReLU gradient
// in its input-gradient GEMM (Layer::fuse_producer_gradient; kMlp's dropout is in the way).
inline constexpr const char* kMlpTwoHidden = R"(
[[layers]]
type = "flatten"
[[layers]]
type = "linear"
out = 64
[[layers]]
type = "relu"
[[layers]]
type = "linear"
out = 32
[[layers]]
type = "relu"
[[layers]]
type = "linear"
out = 10
)";

// A residual block on the GPU: conv-BN-ReLU, conv-BN, their sum (named values), ReLU.
inline constexpr const char* kResidualCnn = R"(
[[layers]]
type = "conv2d"
out_channels = 8
bias = false
padding = 1
[[layers]]
type = "batchnorm2d"
[[layers]]
type = "relu"
name = "s"
[[layers]]
type = "conv2d"
out_channels = 8
bias = false
padding = 1
[[layers]]
type = "batchnorm2d"
name = "f"
[[layers]]
type = "add"
inputs = ["s", "f"]
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

// Two pre-LayerNorm blocks (attention and MLP with residual additions, 2 heads), the LM head
// tied to the token embedding; its keys are read in [model] (build_model on that section).
inline constexpr const char* kGpt = R"(
[model]
family = "gpt"
n_layer = 2
n_head = 2
n_embd = 64
block_size = 16
vocab_size = 50
dropout = 0.0
bias = true
tie_embeddings = true
)";
inline constexpr std::int64_t kGptVocab = 50, kGptPositions = 16;

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
