// Host launchers for inverted dropout (dropout_kernels.cu). The mask of element i comes from
// dropout_uniform(key, i) with key = dropout_key(seed, step, rank, layer_index, micro_batch)
// (include/ringtrain/nn/dropout_rule.hpp). The forward reads the key from device memory, so a
// CUDA graph of it draws a new mask whenever launch_store_key changes the key between replays.
// The stream is an opaque cudaStream_t.
#pragma once
#include <cstdint>

#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain::kernels {

// *slot = key, in stream order (a one-thread kernel: the value travels as its argument).
void launch_store_key(std::uint64_t* slot, std::uint64_t key, void* stream);
// y = x * (keep ? 1/(1-p) : 0), mask[i] = keep (0 or 1), with the key at device address `key`;
// x, y: n of dtype (y may alias x).
void launch_dropout_forward(const void* x, void* y, std::uint8_t* mask, std::int64_t n, float p,
                            const std::uint64_t* key, DType dtype, void* stream);
// dx = dy * (mask[i] ? 1/(1-p) : 0) (dx may alias dy).
void launch_dropout_backward(const void* dy, const std::uint8_t* mask, void* dx, std::int64_t n, float p, DType dtype,
                             void* stream);

}  // namespace ringtrain::kernels
