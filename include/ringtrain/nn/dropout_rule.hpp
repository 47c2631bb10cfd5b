// The dropout rules shared by the CPU Dropout (src/nn/elementwise.cpp) and the CUDA kernel
// (kernels/dropout_kernels.cu): the mask's stream key, the keep test and the inverted scale.
// Host-only header (RT_HOST_DEVICE as in update_rules.hpp).
#pragma once
#include <cstdint>

#include "ringtrain/core/random.hpp"
#include "ringtrain/optim/update_rules.hpp"

namespace ringtrain {

// Purpose index of the dropout streams; layer i draws from kDropoutStream + i.
inline constexpr std::uint64_t kDropoutStream = 0xd50f'0000'0000'0000ull;

// The key of one layer's mask in one micro-batch of one step on one rank. Part of the
// determinism contract: micro-batch 0 keeps the key of runs without accumulation, later
// micro-batches of the step draw their own masks.
constexpr std::uint64_t dropout_key(std::uint64_t seed, std::int64_t step, int rank, int layer_index,
                                    std::int64_t micro_batch = 0) {
  const std::uint64_t key = stream_key(seed, kDropoutStream + static_cast<std::uint64_t>(layer_index),
                                       static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(rank));
  return micro_batch == 0 ? key : stream_key(key, static_cast<std::uint64_t>(micro_batch));
}

// Element with uniform draw u in [0, 1) is kept unless u < p.
RT_HOST_DEVICE inline bool dropout_keep(float u, float p) { return !(u < p); }

// Kept elements are scaled by 1 / (1 - p), dropped ones by 0.
RT_HOST_DEVICE inline float dropout_scale(float p) { return 1.0f / (1.0f - p); }

// Counter-based draw for element i of the mask keyed `key` (any element can be drawn alone,
// so a GPU thread per element and the CPU loop give the same mask): the i-th output of
// SplitMix64 seeded with key, 24 bits, uniform in [0, 1).
RT_HOST_DEVICE inline float dropout_uniform(std::uint64_t key, std::int64_t i) {
  constexpr std::uint64_t kGamma = 0x9e3779b97f4a7c15ull;  // SplitMix64's increment
  return static_cast<float>(splitmix64(key + static_cast<std::uint64_t>(i) * kGamma) >> 40) * 0x1.0p-24f;
}

}  // namespace ringtrain
