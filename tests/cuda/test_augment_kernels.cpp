// GPU augmentation against the CPU decoder (data::SampleDecoder, what the loader runs) with
// draws from draw_augment: f32 bit for bit, bf16/f16 equal to the CPU values rounded, over
// crops, flips, channel counts and odd sizes, on poisoned outputs. Skips without a GPU.
#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "data/sample_decoder.hpp"
#include "kernels/augment_kernels.hpp"
#include "ringtrain/core/random.hpp"

namespace ringtrain {
namespace {

using test::DeviceBuffer;
using test::kFloatDTypes;

struct Case {
  std::int64_t n, c, h, w, padding;
  bool flip;
};

Normalization norm_for(std::int64_t c) {
  if (c == 1) return Normalization{{0.2860}, {0.3530}};
  return Normalization{{0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616}};
}

TEST(CudaAugmentKernels, MatchesTheCpuDecoder) {
  RT_SKIP_WITHOUT_GPU();
  const Case cases[] = {{1, 1, 1, 1, 0, false},       {7, 1, 28, 28, 0, false}, {7, 1, 28, 28, 0, true},
                        {257, 1, 28, 28, 4, true},    {33, 3, 5, 7, 2, true},   {19, 3, 32, 32, 4, false},
                        {1'000'003, 1, 1, 1, 1, true}};
  for (const Case& k : cases) {
    const Normalization norm = norm_for(k.c);
    const AugmentOptions options{k.padding, k.flip};
    const std::int64_t sample = k.c * k.h * k.w;
    Rng rng(stream_key(61));
    std::vector<std::uint8_t> images(static_cast<std::size_t>(k.n * sample));
    for (auto& v : images) v = static_cast<std::uint8_t>(rng.next() >> 56);
    std::vector<AugmentDraw> draws;
    std::vector<float> ref(images.size());
    const data::SampleDecoder decoder(SampleType::u8, Shape{k.c, k.h, k.w}, norm, k.padding);
    for (std::int64_t s = 0; s < k.n; ++s) {
      draws.push_back(draw_augment(options, 7, 2, 1000 + s));
      decoder.decode(reinterpret_cast<const std::byte*>(images.data() + s * sample), draws.back(),
                     ref.data() + s * sample);
    }
    auto d_images = DeviceBuffer::of(images), d_draws = DeviceBuffer::of(draws);
    auto d_table = DeviceBuffer::of(data::u8_table(norm, k.c));
    for (DType dtype : kFloatDTypes) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " [" + std::to_string(k.n) + ", " + std::to_string(k.c) + ", " +
                   std::to_string(k.h) + ", " + std::to_string(k.w) + "] padding " + std::to_string(k.padding) +
                   " flip " + std::to_string(k.flip));
      DeviceBuffer out(images.size() * dtype_size(dtype));
      kernels::launch_augment_u8(d_images.as<std::uint8_t>(), d_draws.as<AugmentDraw>(), d_table.as<float>(), k.n, k.c,
                                 k.h, k.w, k.padding, out.get(), dtype, nullptr);
      test::expect_same_bits(out.read_values(dtype), test::round_to(dtype, ref));
    }
  }
}

TEST(CudaAugmentKernels, NoSamplesLaunchNothing) {
  RT_SKIP_WITHOUT_GPU();
  DeviceBuffer poisoned(16);
  for (DType dtype : kFloatDTypes)
    kernels::launch_augment_u8(nullptr, nullptr, nullptr, 0, 1, 28, 28, 4, poisoned.get(), dtype, nullptr);
  EXPECT_EQ(poisoned.read<std::uint8_t>(), std::vector<std::uint8_t>(16, 0xff));
}

TEST(CudaAugmentKernels, UnsupportedDtypeThrowsNamingIt) {
  test::expect_error_naming(
      [] { kernels::launch_augment_u8(nullptr, nullptr, nullptr, 1, 1, 1, 1, 0, nullptr, DType::u8, nullptr); }, "u8");
}

}  // namespace
}  // namespace ringtrain
