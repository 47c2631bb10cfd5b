// Augmentation and decoding: SampleDecoder matches the step-by-step reference bit for bit for
// every sample dtype, crop offset, padding and flip; draw_augment is a pure function of
// (seed, epoch, index) that covers its whole range; u8_table holds the decoder's values.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "data/sample_decoder.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/dtype.hpp"
#include "unit/data/augment_reference.hpp"
#include "unit/data/h5_files.hpp"

namespace ringtrain {
namespace {

using data::SampleDecoder;

// Every crop origin and flip for one dtype, shape and padding, against the reference.
template <typename T>
void expect_matches_reference(SampleType type, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t pad,
                              const Normalization& norm) {
  const std::int64_t numel = c * h * w;
  std::vector<T> stored = test::sample_values<T>(5, 1, numel);
  if (type == SampleType::f16)  // float16 bits of the pattern values
    for (std::int64_t k = 0; k < numel; ++k)
      stored[static_cast<std::size_t>(k)] = static_cast<T>(float_to_f16(static_cast<float>(test::sample_value(5, k))));
  auto u = [&](std::int64_t k) -> double {
    const T v = stored[static_cast<std::size_t>(k)];
    if (type == SampleType::u8) return static_cast<double>(v) / 255.0;
    if (type == SampleType::f16) return f16_to_float(static_cast<std::uint16_t>(v));
    return static_cast<double>(v);
  };
  std::vector<double> mean = norm.mean, std = norm.std;
  mean.resize(static_cast<std::size_t>(c), mean[0]);
  std.resize(static_cast<std::size_t>(c), std[0]);
  const SampleDecoder decoder(type, Shape{c, h, w}, norm, pad);
  std::vector<float> got(static_cast<std::size_t>(numel));
  for (std::int64_t dy = 0; dy <= 2 * pad; ++dy)
    for (std::int64_t dx = 0; dx <= 2 * pad; ++dx)
      for (const bool flip : {false, true}) {
        const AugmentDraw draw{dy, dx, flip};
        decoder.decode(reinterpret_cast<const std::byte*>(stored.data()), draw, got.data());
        const auto want = test::reference_decode(u, c, h, w, pad, draw, mean, std);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
            << sample_type_name(type) << " pad " << pad << " dy " << dy << " dx " << dx << " flip " << flip;
      }
}

TEST(SampleDecoder, MatchesReferenceForEveryTypeCropAndFlip) {
  const Normalization one{{0.25}, {0.5}};
  const Normalization per_channel{{0.1, 0.2, 0.3}, {0.5, 1.5, 2.0}};
  for (const std::int64_t pad : {0, 1, 3, 8}) {  // 8 > w: whole rows and columns of padding
    expect_matches_reference<std::uint8_t>(SampleType::u8, 3, 5, 7, pad, per_channel);
    expect_matches_reference<std::int8_t>(SampleType::i8, 1, 4, 6, pad, one);
    expect_matches_reference<std::uint16_t>(SampleType::u16, 3, 5, 7, pad, per_channel);
    expect_matches_reference<std::uint16_t>(SampleType::f16, 3, 5, 7, pad, per_channel);
    expect_matches_reference<std::int16_t>(SampleType::i16, 1, 4, 6, pad, one);
    expect_matches_reference<std::int32_t>(SampleType::i32, 1, 4, 6, pad, one);
    expect_matches_reference<std::uint64_t>(SampleType::u64, 1, 4, 6, pad, one);
    expect_matches_reference<float>(SampleType::f32, 3, 5, 7, pad, per_channel);
    expect_matches_reference<double>(SampleType::f64, 1, 4, 6, pad, one);
  }
  expect_matches_reference<std::uint8_t>(SampleType::u8, 1, 28, 28, 4, one);
}

TEST(SampleDecoder, Uint8IsScaledBy255) {
  const SampleDecoder decoder(SampleType::u8, Shape{1, 1, 3}, Normalization{{0.5}, {0.25}}, 0);
  const std::uint8_t v[3] = {0, 255, 51};
  float out[3];
  decoder.decode(reinterpret_cast<const std::byte*>(v), AugmentDraw{}, out);
  EXPECT_EQ(out[0], static_cast<float>((0.0 - 0.5) / 0.25));
  EXPECT_EQ(out[1], static_cast<float>((1.0 - 0.5) / 0.25));
  EXPECT_EQ(out[2], static_cast<float>((51 / 255.0 - 0.5) / 0.25));
}

TEST(SampleDecoder, U8TableIsWhatTheDecoderMakesOfEachValuePerChannel) {
  const Normalization norm{{0.1, 0.5, 0.9}, {0.3, 0.25, 2.0}};
  const std::vector<float> table = data::u8_table(norm, 3);
  ASSERT_EQ(table.size(), 3u * 256u);
  const SampleDecoder decoder(SampleType::u8, Shape{3, 1, 1}, norm, 1);
  for (int v = 0; v < 256; ++v) {
    const std::uint8_t pixel[3] = {static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v),
                                   static_cast<std::uint8_t>(v)};
    float out[3];
    decoder.decode(reinterpret_cast<const std::byte*>(pixel), AugmentDraw{1, 1, false}, out);
    for (int c = 0; c < 3; ++c) EXPECT_EQ(table[static_cast<std::size_t>(c * 256 + v)], out[c]) << c << " " << v;
  }
  // Entry 0 of each channel is also what the padding decodes to.
  float padded[3];
  const std::uint8_t any[3] = {200, 100, 50};
  decoder.decode(reinterpret_cast<const std::byte*>(any), AugmentDraw{0, 0, false}, padded);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(table[static_cast<std::size_t>(c * 256)], padded[c]) << c;
  EXPECT_THROW(data::u8_table(norm, 2), DataError);
}

TEST(SampleDecoder, NormalizationMustFitTheChannels) {
  try {
    SampleDecoder(SampleType::u8, Shape{1, 2, 2}, Normalization{{0.1, 0.2, 0.3}, {1.0}}, 0);
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_STREQ(e.what(), "data.mean: 3 values for samples with 1 channel (give 1)");
  }
}

TEST(DrawAugment, PureFunctionOfSeedEpochAndIndex) {
  const AugmentOptions o{4, true};
  for (std::int64_t i = 0; i < 50; ++i) {
    const AugmentDraw a = draw_augment(o, 7, 3, i);
    const AugmentDraw b = draw_augment(o, 7, 3, i);
    EXPECT_EQ(a.dy, b.dy);
    EXPECT_EQ(a.dx, b.dx);
    EXPECT_EQ(a.flip, b.flip);
  }
  // Other epochs, seeds and indices draw differently (somewhere among 200 samples).
  int differ_epoch = 0, differ_seed = 0;
  for (std::int64_t i = 0; i < 200; ++i) {
    const AugmentDraw a = draw_augment(o, 7, 3, i);
    const AugmentDraw e = draw_augment(o, 7, 4, i);
    const AugmentDraw s = draw_augment(o, 8, 3, i);
    differ_epoch += a.dy != e.dy || a.dx != e.dx || a.flip != e.flip;
    differ_seed += a.dy != s.dy || a.dx != s.dx || a.flip != s.flip;
  }
  EXPECT_GT(differ_epoch, 150);
  EXPECT_GT(differ_seed, 150);
}

TEST(DrawAugment, CoversTheRangeAndRespectsOptions) {
  std::set<std::int64_t> dys, dxs;
  int flips = 0;
  for (std::int64_t i = 0; i < 2000; ++i) {
    const AugmentDraw d = draw_augment(AugmentOptions{2, true}, 1, 0, i);
    dys.insert(d.dy);
    dxs.insert(d.dx);
    flips += d.flip;
  }
  EXPECT_EQ(dys, (std::set<std::int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(dxs, (std::set<std::int64_t>{0, 1, 2, 3, 4}));
  EXPECT_GT(flips, 850);
  EXPECT_LT(flips, 1150);
  for (std::int64_t i = 0; i < 100; ++i) {
    const AugmentDraw crop_only = draw_augment(AugmentOptions{3, false}, 1, 0, i);
    EXPECT_FALSE(crop_only.flip);
    const AugmentDraw flip_only = draw_augment(AugmentOptions{0, true}, 1, 0, i);
    EXPECT_EQ(flip_only.dy, 0);
    EXPECT_EQ(flip_only.dx, 0);
    // Turning flipping on does not change the crop drawn for the same sample.
    const AugmentDraw both = draw_augment(AugmentOptions{3, true}, 1, 0, i);
    EXPECT_EQ(both.dy, crop_only.dy);
    EXPECT_EQ(both.dx, crop_only.dx);
  }
  const AugmentDraw off = draw_augment(AugmentOptions{}, 1, 0, 5);
  EXPECT_EQ(off.dy, 0);
  EXPECT_FALSE(off.flip);
}

}  // namespace
}  // namespace ringtrain
