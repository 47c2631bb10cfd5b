// Host launchers for dtype casts and f32 element-wise updates (tensor_kernels.cu). Device
// pointers; the stream is an opaque cudaStream_t; n == 0 launches nothing.
#pragma once
#include <cstdint>

#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain::kernels {

// dst = src converted, bit-exact with dtype.hpp's host conversions, for any pair of f32, bf16
// and f16 (half to half goes through float, as on the host; the same dtype is a copy).
void launch_cast(const void* src, DType from, void* dst, DType to, std::int64_t n, void* stream);
// y = a + b over n elements of dtype (f32, bf16 or f16; summed in float, rounded once); y may
// alias a or b, so dst += src is launch_add(dst, dst, src, ...).
void launch_add(void* y, const void* a, const void* b, std::int64_t n, DType dtype, void* stream);
// dsts[k] += src for k < count (1..kMaxAccumulateTargets), src read once.
constexpr int kMaxAccumulateTargets = 4;
void launch_accumulate_each(float* const* dsts, int count, const float* src, std::int64_t n, void* stream);
void launch_scale(float* x, float factor, std::int64_t n, void* stream);            // x *= factor
void launch_apply_mask(float* x, const float* mask, std::int64_t n, void* stream);  // x = 0 where mask == 0 (pruning)

}  // namespace ringtrain::kernels
