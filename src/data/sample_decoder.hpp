// Private: turns one stored sample (any SampleType, [C, H, W]) into normalized floats with its
// crop and flip applied, in one pass over the output. The tests hold a step-by-step reference
// (pad, crop, flip, normalize) that this must match bit for bit.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ringtrain/data/augment.hpp"
#include "ringtrain/data/dataset.hpp"

namespace ringtrain::data {

class SampleDecoder {
 public:
  // DataError naming data.mean / data.std when they give neither 1 nor C values.
  SampleDecoder(SampleType type, const Shape& chw, const Normalization& norm, std::int64_t crop_padding);

  // dst: C*H*W floats. `draw` as from draw_augment with the same crop_padding.
  void decode(const std::byte* src, const AugmentDraw& draw, float* dst) const;

 private:
  template <typename T>
  void decode_as(const T* src, const AugmentDraw& draw, float* dst) const;
  float normalized(double u, std::int64_t c) const {
    return static_cast<float>((u - mean_[static_cast<std::size_t>(c)]) / std_[static_cast<std::size_t>(c)]);
  }

  SampleType type_;
  std::int64_t c_, h_, w_, pad_;
  std::vector<double> mean_, std_;           // per channel
  std::vector<float> fill_;                  // a padding pixel, per channel
  std::vector<std::array<float, 256>> lut_;  // uint8 only: every value, per channel
};

// [channels][256]: entry [c][v] is what a uint8 SampleDecoder with `norm` makes of value v in
// channel c (so [c][0] is also the padding value): the table kernels::launch_augment_u8 reads.
// DataError as the decoder's.
std::vector<float> u8_table(const Normalization& norm, std::int64_t channels);

}  // namespace ringtrain::data
