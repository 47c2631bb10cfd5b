// Dropout's random draws against known answers computed outside ringtrain (Python, from
// SplitMix64's definition): the per-element draw is SplitMix64's reference sequence (Vigna's
// splitmix64.c, seed 1234567), the layer's mask key is pinned for one (seed, step, rank, layer,
// micro-batch), and the CPU layer drops exactly the elements those draws say. The CUDA kernel
// shares dropout_rule.hpp, so these pin its masks too.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ringtrain/nn/dropout_rule.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain {
namespace {

TEST(DropoutDraws, AreSplitMix64sReferenceSequence) {
  // The first outputs of splitmix64.c seeded with 1234567; a draw is the top 24 bits / 2^24.
  const std::uint64_t reference[] = {6457827717110365317ull, 3203168211198807973ull, 9817491932198370423ull,
                                     4593380528125082431ull, 16408922859458223821ull};
  for (std::int64_t i = 0; i < 5; ++i)
    EXPECT_EQ(dropout_uniform(1234567, i), static_cast<float>(reference[i] >> 40) * 0x1.0p-24f) << "element " << i;
}

TEST(DropoutDraws, TheMaskKeyIsPinned) {
  EXPECT_EQ(dropout_key(42, 7, 3, 2), 0x8a9d13ba60d94c80ull);
  EXPECT_EQ(dropout_key(42, 7, 3, 2, 1), 0x2b6e5781f030f22aull);  // micro-batch 1 draws its own mask
}

std::vector<float> dropout_of_ones(std::int64_t micro_batch) {
  Dropout dropout(0.5, 2);
  Tensor x = Tensor::empty(Shape{8});
  for (std::int64_t i = 0; i < 8; ++i) x.f32()[i] = 1.0f;
  Tensor y = Tensor::empty(Shape{8});
  dropout.forward(x, y, StepInfo{true, 42, 7, 3, micro_batch});
  return std::vector<float>(y.f32(), y.f32() + 8);
}

TEST(DropoutDraws, TheLayerDropsTheKnownElements) {
  // p = 0.5: kept where the draw's top 24 bits are >= 2^23; kept elements are scaled by 2.
  EXPECT_EQ(dropout_of_ones(0), (std::vector<float>{2, 0, 0, 2, 0, 2, 2, 0}));
  EXPECT_EQ(dropout_of_ones(1), (std::vector<float>{0, 0, 2, 2, 0, 2, 2, 2}));
}

}  // namespace
}  // namespace ringtrain
