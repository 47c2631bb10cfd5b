// bf16/f16 conversions: exact values round-trip, rounding is to nearest even, specials hold.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain {
namespace {

TEST(DType, HalfRoundTripsExactValues) {
  for (float v : {0.0f, 1.0f, -2.5f, 0.125f, 1024.0f, 65504.0f, 6.103515625e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(f16_to_float(float_to_f16(v)), v) << v;
  }
  for (float v : {0.0f, 1.0f, -2.5f, 0.125f, 256.0f}) EXPECT_EQ(bf16_to_float(float_to_bf16(v)), v) << v;
}

TEST(DType, RoundToNearestEven) {
  // 1 + 2^-11 lies halfway between f16 1.0 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + 0x1.0p-11f)), 1.0f);
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + 3 * 0x1.0p-11f)), 1.0f + 2 * 0x1.0p-10f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 0x1.0p-8f)), 1.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * 0x1.0p-8f)), 1.0f + 2 * 0x1.0p-7f);
}

TEST(DType, Specials) {
  EXPECT_TRUE(std::isinf(f16_to_float(float_to_f16(1e6f))));
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_name(DType::i32), "i32");
}

}  // namespace
}  // namespace ringtrain
