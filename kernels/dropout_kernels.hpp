// Host launchers for inverted dropout (dropout_kernels.cu). The mask of element i comes from
// dropout_uniform(key, i) with key = dropout_key(seed, step, rank, layer_index)
// (include/ringtrain/nn/dropout_rule.hpp). The stream is an opaque cudaStream_t.
#pragma once
#include <cstdint>

#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain::kernels {

// y = x * (keep ? 1/(1-p) : 0), mask[i] = keep (0 or 1); x, y: n of dtype (y may alias x).
void launch_dropout_forward(const void* x, void* y, std::uint8_t* mask, std::int64_t n, float p, std::uint64_t key,
                            DType dtype, void* stream);
// dx = dy * (mask[i] ? 1/(1-p) : 0) (dx may alias dy).
void launch_dropout_backward(const void* dy, const std::uint8_t* mask, void* dx, std::int64_t n, float p, DType dtype,
                             void* stream);

}  // namespace ringtrain::kernels
