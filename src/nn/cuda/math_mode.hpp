// MathMode: whether f32 GEMMs and convolutions may use TF32 tensor cores. bf16/f16 inputs
// always use tensor cores with f32 accumulation; the mode only matters for f32 inputs.
#pragma once

namespace ringtrain::cuda {

enum class MathMode { strict_f32, tf32 };

}  // namespace ringtrain::cuda
