// draw_augment, SampleDecoder and u8_table. The decoder walks output rows: rows and column
// spans that fall in the padding are filled with the channel's padding value, the rest read the
// source row forwards (or backwards when flipped) through the per-type conversion.
#include <algorithm>

#include "data/sample_decoder.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain {

AugmentDraw draw_augment(const AugmentOptions& options, std::uint64_t seed, std::int64_t epoch, std::int64_t index) {
  AugmentDraw d{options.crop_padding, options.crop_padding, false};
  if (!options.enabled()) return d;
  Rng rng(stream_key(seed, kAugmentStream, static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(index)));
  // Always three draws in this order, whichever options are on, so turning one on does not
  // change the other's choices.
  const auto span = static_cast<std::uint64_t>(2 * options.crop_padding + 1);
  const auto dy = static_cast<std::int64_t>(rng.below(span));
  const auto dx = static_cast<std::int64_t>(rng.below(span));
  const bool flip = (rng.next() >> 63) != 0;
  if (options.crop_padding > 0) d = AugmentDraw{dy, dx, false};
  d.flip = options.flip && flip;
  return d;
}

namespace data {
namespace {

// dst[k] = convert(src[k]) for k < n, four at a time: the loop body is a load, a table or
// arithmetic conversion and a store, so its own overhead (and its placement in the code)
// otherwise costs a good part of the time.
template <typename T, typename F>
void convert_run(const T* src, float* dst, std::int64_t n, F&& convert) {
  std::int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    dst[k] = convert(src[k]);
    dst[k + 1] = convert(src[k + 1]);
    dst[k + 2] = convert(src[k + 2]);
    dst[k + 3] = convert(src[k + 3]);
  }
  for (; k < n; ++k) dst[k] = convert(src[k]);
}

std::vector<double> per_channel(const std::vector<double>& v, std::int64_t channels, const char* key) {
  RT_REQUIRE(v.size() == 1 || static_cast<std::int64_t>(v.size()) == channels, DataError,
             "{}: {} values for samples with {} channel{} (give {})", key, v.size(), channels, channels == 1 ? "" : "s",
             channels == 1 ? std::string("1") : fmt::format("1 or {}", channels));
  return v.size() == 1 ? std::vector<double>(static_cast<std::size_t>(channels), v[0]) : v;
}

}  // namespace

SampleDecoder::SampleDecoder(SampleType type, const Shape& chw, const Normalization& norm, std::int64_t crop_padding)
    : type_(type), c_(chw[0]), h_(chw[1]), w_(chw[2]), pad_(crop_padding) {
  mean_ = per_channel(norm.mean, c_, "data.mean");
  std_ = per_channel(norm.std, c_, "data.std");
  for (std::int64_t c = 0; c < c_; ++c) fill_.push_back(normalized(0.0, c));
  if (type_ == SampleType::u8) {
    lut_.resize(static_cast<std::size_t>(c_));
    for (std::int64_t c = 0; c < c_; ++c)
      for (int v = 0; v < 256; ++v)
        lut_[static_cast<std::size_t>(c)][static_cast<std::size_t>(v)] = normalized(v / 255.0, c);
  }
}

template <typename T>
void SampleDecoder::decode_as(const T* src, const AugmentDraw& draw, float* dst) const {
  // Output column x reads source column (flip ? w-1-x : x) + off.
  const std::int64_t off = draw.dx - pad_;
  const std::int64_t x_lo = draw.flip ? std::max<std::int64_t>(0, off) : std::max<std::int64_t>(0, -off);
  const std::int64_t x_hi = draw.flip ? std::min(w_, w_ + off) : std::min(w_, w_ - off);
  for (std::int64_t c = 0; c < c_; ++c) {
    const float pad = fill_[static_cast<std::size_t>(c)];
    const float* lut = lut_.empty() ? nullptr : lut_[static_cast<std::size_t>(c)].data();
    auto convert = [&](T v) -> float {
      if constexpr (std::is_same_v<T, std::uint8_t>) {
        return lut[v];
      } else if constexpr (std::is_same_v<T, std::uint16_t>) {
        // 16-bit unsigned storage is either uint16 or float16 bits.
        return type_ == SampleType::f16 ? normalized(f16_to_float(v), c) : normalized(static_cast<double>(v), c);
      } else {
        return normalized(static_cast<double>(v), c);
      }
    };
    if (draw.dy == pad_ && off == 0 && !draw.flip) {  // no crop offset, no flip: the plane in one run
      const T* plane = src + c * h_ * w_;
      float* out = dst + c * h_ * w_;
      convert_run(plane, out, h_ * w_, convert);
      continue;
    }
    for (std::int64_t y = 0; y < h_; ++y) {
      float* out = dst + (c * h_ + y) * w_;
      const std::int64_t sy = y + draw.dy - pad_;
      if (sy < 0 || sy >= h_ || x_lo >= x_hi) {
        std::fill(out, out + w_, pad);
        continue;
      }
      const T* row = src + (c * h_ + sy) * w_;
      std::fill(out, out + x_lo, pad);
      if (draw.flip) {
        const T* from = row + (w_ - 1 + off);
        for (std::int64_t x = x_lo; x < x_hi; ++x) out[x] = convert(from[-x]);
      } else {
        convert_run(row + off + x_lo, out + x_lo, x_hi - x_lo, convert);
      }
      std::fill(out + x_hi, out + w_, pad);
    }
  }
}

void SampleDecoder::decode(const std::byte* src, const AugmentDraw& draw, float* dst) const {
  switch (type_) {
    case SampleType::u8: return decode_as(reinterpret_cast<const std::uint8_t*>(src), draw, dst);
    case SampleType::i8: return decode_as(reinterpret_cast<const std::int8_t*>(src), draw, dst);
    case SampleType::u16:
    case SampleType::f16: return decode_as(reinterpret_cast<const std::uint16_t*>(src), draw, dst);
    case SampleType::i16: return decode_as(reinterpret_cast<const std::int16_t*>(src), draw, dst);
    case SampleType::u32: return decode_as(reinterpret_cast<const std::uint32_t*>(src), draw, dst);
    case SampleType::i32: return decode_as(reinterpret_cast<const std::int32_t*>(src), draw, dst);
    case SampleType::u64: return decode_as(reinterpret_cast<const std::uint64_t*>(src), draw, dst);
    case SampleType::i64: return decode_as(reinterpret_cast<const std::int64_t*>(src), draw, dst);
    case SampleType::f32: return decode_as(reinterpret_cast<const float*>(src), draw, dst);
    case SampleType::f64: return decode_as(reinterpret_cast<const double*>(src), draw, dst);
  }
}

std::vector<float> u8_table(const Normalization& norm, std::int64_t channels) {
  // A [channels, 1, 256] ramp 0..255 decoded without crop: the decoder's own conversion.
  std::vector<std::uint8_t> ramp(static_cast<std::size_t>(channels * 256));
  for (std::size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<std::uint8_t>(i % 256);
  std::vector<float> table(ramp.size());
  SampleDecoder(SampleType::u8, Shape{channels, 1, 256}, norm, 0)
      .decode(reinterpret_cast<const std::byte*>(ramp.data()), AugmentDraw{0, 0, false}, table.data());
  return table;
}

}  // namespace data
}  // namespace ringtrain
