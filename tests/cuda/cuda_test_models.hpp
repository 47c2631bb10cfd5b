// The small models the CUDA model and step tests train (an MLP with a dropout layer of p = 0,
// a CNN with batch norm) on [1, 12, 12] inputs, a GPT on token windows, and binding this
// process to its GPU.
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
