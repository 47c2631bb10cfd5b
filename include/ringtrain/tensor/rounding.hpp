// Low-precision emulation on f32 storage: rounding values to bf16/f16 exactly as storing them
// in that type would (round to nearest even, f16 overflow to +-inf), and a fast Inf/NaN test
// for the loss scaler's overflow check.
#pragma once
#include <cstdint>

#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain {

// Replaces each of the n values by the nearest value of type `to` (bit-exact with
// float_to_bf16/float_to_f16 and back). f32: no-op. Other types: Error.
void round_in_place(float* x, std::int64_t n, DType to);

// Whether any of the n values is Inf or NaN (an exponent test on the bits, no branch per element).
bool has_nonfinite(const float* x, std::int64_t n);

}  // namespace ringtrain
