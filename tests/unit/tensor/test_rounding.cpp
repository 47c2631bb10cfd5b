// round_in_place against dtype.hpp's conversions (random values over the whole exponent
// range, and special values with their known roundings: ties, subnormals, f16 overflow,
// NaN), and has_nonfinite on Inf/NaN anywhere in a buffer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/rounding.hpp"

namespace ringtrain {
namespace {

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float rounded(float x, DType t) {
  round_in_place(&x, 1, t);
  return x;
}

// Random bit patterns: every exponent (subnormals, Inf and NaN included) and sign.
std::vector<float> random_values(std::size_t n) {
  std::mt19937 gen(7);
  std::vector<float> v(n);
  for (auto& x : v) x = from_bits(static_cast<std::uint32_t>(gen()));
  return v;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << i;
    } else {
      ASSERT_EQ(bits(got[i]), bits(want[i])) << "element " << i << ": " << want[i] << " vs " << got[i];
    }
  }
}

TEST(Rounding, Bf16MatchesDtypeConversionsOnRandomBits) {
  const std::vector<float> in = random_values(1 << 18);
  std::vector<float> got = in, want(in.size());
  round_in_place(got.data(), static_cast<std::int64_t>(got.size()), DType::bf16);
  for (std::size_t i = 0; i < in.size(); ++i) want[i] = bf16_to_float(float_to_bf16(in[i]));
  expect_same_bits(got, want);
  std::size_t changed = 0;  // the rounding did something (low 16 bits were mostly non-zero)
  for (std::size_t i = 0; i < in.size(); ++i) changed += bits(got[i]) != bits(in[i]) ? 1 : 0;
  EXPECT_GT(changed, in.size() / 2);
}

TEST(Rounding, F16MatchesDtypeConversionsOnRandomBits) {
  std::vector<float> in = random_values(1 << 18);
  // Half of them within f16's range, where subnormals and ties actually occur.
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> exp(-27.0f, 16.5f);
  for (std::size_t i = 0; i < in.size(); i += 2) in[i] = std::copysign(std::exp2(exp(gen)), in[i]);
  std::vector<float> got = in, want(in.size());
  round_in_place(got.data(), static_cast<std::int64_t>(got.size()), DType::f16);
  for (std::size_t i = 0; i < in.size(); ++i) want[i] = f16_to_float(float_to_f16(in[i]));
  expect_same_bits(got, want);
}

TEST(Rounding, Bf16SpecialValues) {
  EXPECT_EQ(rounded(1.0f + 0x1p-8f, DType::bf16), 1.0f);                         // tie to even (down)
  EXPECT_EQ(rounded(1.0f + 3 * 0x1p-8f, DType::bf16), 1.0f + 0x1p-6f);           // tie to even (up)
  EXPECT_EQ(rounded(1.0f + 0x1p-8f + 0x1p-20f, DType::bf16), 1.0f + 0x1p-7f);    // above the tie
  EXPECT_EQ(rounded(std::numeric_limits<float>::max(), DType::bf16), INFINITY);  // rounds past bf16's max
  EXPECT_EQ(rounded(0x1p-130f, DType::bf16), 0x1p-130f);                         // a subnormal that fits
  EXPECT_EQ(rounded(0x1p-140f, DType::bf16), 0.0f);  // below bf16's smallest subnormal (2^-133)
  EXPECT_EQ(bits(rounded(-0.0f, DType::bf16)), bits(-0.0f));
  EXPECT_EQ(rounded(-INFINITY, DType::bf16), -INFINITY);
  EXPECT_TRUE(std::isnan(rounded(NAN, DType::bf16)));
  EXPECT_TRUE(std::isnan(rounded(from_bits(0x7f800001u), DType::bf16)));  // a NaN whose top bits look like Inf
}

TEST(Rounding, F16SpecialValues) {
  EXPECT_EQ(rounded(65504.0f, DType::f16), 65504.0f);  // the largest f16
  EXPECT_EQ(rounded(65519.0f, DType::f16), 65504.0f);  // below the midpoint to 65536
  EXPECT_EQ(rounded(65520.0f, DType::f16), INFINITY);  // the midpoint ties to "65536": Inf, like real fp16
  EXPECT_EQ(rounded(-1e6f, DType::f16), -INFINITY);
  EXPECT_EQ(rounded(1.0f + 0x1p-11f, DType::f16), 1.0f);                // tie to even (down)
  EXPECT_EQ(rounded(1.0f + 3 * 0x1p-11f, DType::f16), 1.0f + 0x1p-9f);  // tie to even (up)
  EXPECT_EQ(rounded(0x1p-24f, DType::f16), 0x1p-24f);                   // the smallest subnormal
  EXPECT_EQ(rounded(0x1p-25f, DType::f16), 0.0f);                       // half of it: tie to even zero
  EXPECT_EQ(rounded(0x1.8p-25f, DType::f16), 0x1p-24f);                 // above half: up
  EXPECT_EQ(rounded(3 * 0x1p-25f, DType::f16), 2 * 0x1p-24f);           // 1.5 subnormal steps: tie to even (2)
  EXPECT_EQ(rounded(0x1p-15f + 0x1p-30f, DType::f16), 0x1p-15f);        // subnormal range, 10-bit step 2^-24
  EXPECT_EQ(bits(rounded(-0x1p-26f, DType::f16)), bits(-0.0f));
  EXPECT_TRUE(std::isnan(rounded(NAN, DType::f16)));
}

TEST(Rounding, F32IsANoOpAndOtherTypesAreRefused) {
  std::vector<float> v = random_values(1000);
  const std::vector<float> before = v;
  round_in_place(v.data(), static_cast<std::int64_t>(v.size()), DType::f32);
  for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(bits(v[i]), bits(before[i]));
  float x = 1.0f;
  EXPECT_THROW(round_in_place(&x, 1, DType::i32), Error);
}

TEST(Rounding, HasNonfiniteFindsInfAndNanAnywhere) {
  std::vector<float> v(1003, 1.0f);
  v[7] = std::numeric_limits<float>::max();
  v[8] = -std::numeric_limits<float>::max();
  v[9] = std::numeric_limits<float>::denorm_min();
  EXPECT_FALSE(has_nonfinite(v.data(), static_cast<std::int64_t>(v.size())));
  EXPECT_FALSE(has_nonfinite(v.data(), 0));
  for (float bad : {INFINITY, -INFINITY, NAN, -NAN, from_bits(0x7f800001u)}) {
    for (std::size_t at : {std::size_t{0}, std::size_t{500}, v.size() - 1}) {
      std::vector<float> w = v;
      w[at] = bad;
      EXPECT_TRUE(has_nonfinite(w.data(), static_cast<std::int64_t>(w.size()))) << bad << " at " << at;
      EXPECT_EQ(has_nonfinite(w.data(), static_cast<std::int64_t>(at)), false) << "only the first " << at;
    }
  }
}

}  // namespace
}  // namespace ringtrain
