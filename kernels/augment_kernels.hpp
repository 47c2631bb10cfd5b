// Host side of the GPU augmentation (augment_kernels.cu): crop from the zero-padded image,
// horizontal flip and per-channel normalization of a u8 batch, the same values the CPU
// loader's decoder (src/data/augment.cpp) produces. The stream is an opaque cudaStream_t.
#pragma once
#include <cstdint>

#include "ringtrain/data/augment.hpp"
#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain::kernels {

// src: device u8 images [n, c, h, w]. draws: device array of n AugmentDraw, sample s's as
// draw_augment(options, seed, epoch, global index of s) returned it with crop_padding =
// padding (a plain struct: copy the host array as bytes). table: device [c][256] floats,
// entry [ch][v] being what the CPU decoder makes of value v in channel ch (see augment.hpp):
// decode a [c, 1, 256] ramp 0..255 with data::SampleDecoder and no crop, as the test does;
// [ch][0] is also the padding value, since padding decodes as 0. dst: device [n, c, h, w] of
// dtype (f32, bf16 or f16), every element written: output (y, x) reads source
// (y + dy - padding, (flip ? w-1-x : x) + dx - padding), or padding outside the image.
// n == 0 launches nothing.
void launch_augment_u8(const std::uint8_t* src, const AugmentDraw* draws, const float* table, std::int64_t n,
                       std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t padding, void* dst, DType dtype,
                       void* stream);

}  // namespace ringtrain::kernels
