// The step-by-step CPU reference for SampleDecoder, written for clarity, not speed: decode
// every element to double (u8 / 255, f16 via f16_to_float, others as they are), zero-pad,
// crop at the drawn origin, mirror, then normalize each element to float. The decoder fuses
// these steps and must match this bit for bit.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "ringtrain/data/augment.hpp"

namespace ringtrain::test {

// src: c*h*w stored elements; u(k) decodes element k. mean/std: one per channel.
inline std::vector<float> reference_decode(const std::function<double(std::int64_t)>& u, std::int64_t c, std::int64_t h,
                                           std::int64_t w, std::int64_t pad, const AugmentDraw& draw,
                                           const std::vector<double>& mean, const std::vector<double>& std) {
  const std::int64_t ph = h + 2 * pad, pw = w + 2 * pad;
  std::vector<float> out(static_cast<std::size_t>(c * h * w));
  for (std::int64_t ch = 0; ch < c; ++ch) {
    // 1. decode and zero-pad
    std::vector<double> padded(static_cast<std::size_t>(ph * pw), 0.0);
    for (std::int64_t y = 0; y < h; ++y)
      for (std::int64_t x = 0; x < w; ++x)
        padded[static_cast<std::size_t>((y + pad) * pw + x + pad)] = u((ch * h + y) * w + x);
    // 2. crop h x w at (dy, dx)
    std::vector<double> crop(static_cast<std::size_t>(h * w));
    for (std::int64_t y = 0; y < h; ++y)
      for (std::int64_t x = 0; x < w; ++x)
        crop[static_cast<std::size_t>(y * w + x)] = padded[static_cast<std::size_t>((y + draw.dy) * pw + x + draw.dx)];
    // 3. mirror left-right
    std::vector<double> flipped = crop;
    if (draw.flip)
      for (std::int64_t y = 0; y < h; ++y)
        for (std::int64_t x = 0; x < w; ++x)
          flipped[static_cast<std::size_t>(y * w + x)] = crop[static_cast<std::size_t>(y * w + (w - 1 - x))];
    // 4. normalize
    for (std::int64_t k = 0; k < h * w; ++k)
      out[static_cast<std::size_t>(ch * h * w + k)] =
          static_cast<float>((flipped[static_cast<std::size_t>(k)] - mean[static_cast<std::size_t>(ch)]) /
                             std[static_cast<std::size_t>(ch)]);
  }
  return out;
}

}  // namespace ringtrain::test
