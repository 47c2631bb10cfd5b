// Casts (a copy to the same type, else bit-exact with dtype.hpp's host conversions: every 16-bit pattern, random and
// special f32 bit patterns including NaN payloads, subnormals and rounding ties) and f32 accumulate (into one or
// several targets), scale and mask against plain loops. Skips without a GPU (dtype checks aside).
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "kernels/tensor_kernels.hpp"
#include "ringtrain/core/random.hpp"

namespace ringtrain {
namespace {

using test::DeviceBuffer;
using test::kFloatDTypes;

constexpr std::size_t kSizes[] = {1, 7, 1'000'003, test::kBeyondOneGrid};

// n stored values of dtype as raw bytes: 16-bit types cycle through every pattern; f32 starts
// with special values, then random bits.
std::vector<std::uint8_t> source_bits(DType dtype, std::size_t n) {
  std::vector<std::uint8_t> raw(n * dtype_size(dtype));
  if (dtype != DType::f32) {
    for (std::size_t i = 0; i < n; ++i) {
      const auto h = static_cast<std::uint16_t>(i * 40503u + 1u);  // odd multiplier: a permutation of 2^16
      std::memcpy(raw.data() + 2 * i, &h, 2);
    }
    return raw;
  }
  const std::uint32_t special[] = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,  // zeros, infinities
      0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fa5a5a5u,  // quiet / signalling NaNs with payloads
      0x00000001u, 0x807fffffu, 0x00400000u,               // f32 subnormals
      0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u,  // bf16 ties (to even both ways) and near-ties
      0x3f801000u, 0x3f803000u, 0x477fefffu, 0x477ff000u,  // f16 ties; f16 max and its overflow tie
      0x33000000u, 0x33000001u, 0x387fe000u, 0x38800000u,  // f16 subnormal / normal boundaries
      0x7f7fffffu, 0xff7fffffu};                           // f32 max: bf16 overflows to inf
  Rng rng(stream_key(21));
  for (std::size_t i = 0; i < n; ++i) {
    const auto u = i < std::size(special) ? special[i] : static_cast<std::uint32_t>(rng.next());
    std::memcpy(raw.data() + 4 * i, &u, 4);
  }
  return raw;
}

float host_load(DType dtype, const std::uint8_t* p) {
  if (dtype == DType::f32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return dtype == DType::bf16 ? bf16_to_float(h) : f16_to_float(h);
}

void host_store(DType dtype, float f, std::uint8_t* p) {
  if (dtype == DType::f32) {
    std::memcpy(p, &f, 4);
    return;
  }
  const std::uint16_t h = dtype == DType::bf16 ? float_to_bf16(f) : float_to_f16(f);
  std::memcpy(p, &h, 2);
}

template <typename W>
std::vector<W> as_words(const std::vector<std::uint8_t>& raw) {
  std::vector<W> words(raw.size() / sizeof(W));
  std::memcpy(words.data(), raw.data(), words.size() * sizeof(W));
  return words;
}

TEST(CudaTensorKernels, CastIsBitExactWithHostConversions) {
  RT_SKIP_WITHOUT_GPU();
  for (DType from : kFloatDTypes)
    for (DType to : kFloatDTypes)
      for (std::size_t n : kSizes) {
        SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)) + " n " + std::to_string(n));
        const auto src = source_bits(from, n);
        // A cast to the same type is a copy (NaN payloads and signalling NaNs kept); any other
        // goes through f32 as the host converts.
        std::vector<std::uint8_t> ref = src;
        if (from != to) {
          ref.assign(n * dtype_size(to), 0);
          for (std::size_t i = 0; i < n; ++i)
            host_store(to, host_load(from, src.data() + i * dtype_size(from)), ref.data() + i * dtype_size(to));
        }
        auto dsrc = DeviceBuffer::of(src);
        DeviceBuffer ddst(ref.size());
        kernels::launch_cast(dsrc.get(), from, ddst.get(), to, static_cast<std::int64_t>(n), nullptr);
        // Compared as elements of the destination type's width.
        if (dtype_size(to) == 4)
          test::expect_same_bits(ddst.read<std::uint32_t>(), as_words<std::uint32_t>(ref));
        else
          test::expect_same_bits(ddst.read<std::uint16_t>(), as_words<std::uint16_t>(ref));
        // Views one element in (not 16-byte aligned: element by element, not in vectors): the same bits.
        std::vector<std::uint8_t> shifted_src(dtype_size(from), 0);
        shifted_src.insert(shifted_src.end(), src.begin(), src.end());
        auto dsrc1 = DeviceBuffer::of(shifted_src);
        DeviceBuffer ddst1(ref.size() + dtype_size(to));
        kernels::launch_cast(dsrc1.at(dtype_size(from)), from, ddst1.at(dtype_size(to)), to,
                             static_cast<std::int64_t>(n), nullptr);
        test::expect_same_bits(ddst1.bytes_from(dtype_size(to)), ref);
      }
}

TEST(CudaTensorKernels, AccumulateScaleAndMaskMatchLoops) {
  RT_SKIP_WITHOUT_GPU();
  for (std::size_t n : kSizes) {
    SCOPED_TRACE("n " + std::to_string(n));
    const auto a = test::random_values(n, 31), b = test::random_values(n, 32, DType::f32, 3.0f);
    std::vector<float> mask(n);
    Rng rng(stream_key(33));
    for (float& m : mask) m = rng.uniform() < 0.5f ? 0.0f : 1.0f;
    // Masked elements become exactly +0, as the CPU pruner writes them: also a negative one and
    // a NaN (a product with the mask would give -0 and NaN).
    std::vector<float> masked_input = a;
    masked_input[0] = std::numeric_limits<float>::quiet_NaN();
    mask[0] = 0.0f;
    if (n > 1) {
      masked_input[n - 1] = -2.5f;
      mask[n - 1] = 0.0f;
    }
    std::vector<float> sum(n), scaled(n), masked(n);
    for (std::size_t i = 0; i < n; ++i) {
      sum[i] = a[i] + b[i];
      scaled[i] = a[i] * -0.375f;
      masked[i] = mask[i] == 0.0f ? 0.0f : masked_input[i];
    }
    const auto len = static_cast<std::int64_t>(n);
    auto da = DeviceBuffer::of(a), db = DeviceBuffer::of(b), dm = DeviceBuffer::of(mask);
    kernels::launch_add(da.get(), da.get(), db.get(), len, DType::f32, nullptr);
    test::expect_same_bits(da.read<float>(), sum);
    da = DeviceBuffer::of(a);
    kernels::launch_scale(da.as<float>(), -0.375f, len, nullptr);
    test::expect_same_bits(da.read<float>(), scaled);
    da = DeviceBuffer::of(masked_input);
    kernels::launch_apply_mask(da.as<float>(), dm.as<float>(), len, nullptr);
    test::expect_same_bits(da.read<float>(), masked);
    // accumulate_each: b added to three targets in one pass, as three accumulates would.
    auto t0 = DeviceBuffer::of(a), t1 = DeviceBuffer::of(scaled), t2 = DeviceBuffer::of(b);
    float* const targets[] = {t0.as<float>(), t1.as<float>(), t2.as<float>()};
    kernels::launch_accumulate_each(targets, 3, db.as<float>(), len, nullptr);
    std::vector<float> sum1(n), sum2(n);
    for (std::size_t i = 0; i < n; ++i) {
      sum1[i] = scaled[i] + b[i];
      sum2[i] = b[i] + b[i];
    }
    test::expect_same_bits(t0.read<float>(), sum);
    test::expect_same_bits(t1.read<float>(), sum1);
    test::expect_same_bits(t2.read<float>(), sum2);
  }
}

TEST(CudaTensorKernels, NoElementsLaunchNothing) {
  RT_SKIP_WITHOUT_GPU();
  DeviceBuffer poisoned(16);
  for (DType from : kFloatDTypes)
    for (DType to : kFloatDTypes) kernels::launch_cast(poisoned.get(), from, poisoned.get(), to, 0, nullptr);
  for (DType t : kFloatDTypes) kernels::launch_add(poisoned.get(), poisoned.get(), poisoned.get(), 0, t, nullptr);
  float* const targets[] = {poisoned.as<float>()};
  kernels::launch_accumulate_each(targets, 1, poisoned.as<float>(), 0, nullptr);
  kernels::launch_scale(poisoned.as<float>(), 2.0f, 0, nullptr);
  kernels::launch_apply_mask(poisoned.as<float>(), poisoned.as<float>(), 0, nullptr);
  EXPECT_EQ(poisoned.read<std::uint8_t>(), std::vector<std::uint8_t>(16, 0xff));
}

TEST(CudaTensorKernels, UnsupportedDtypeThrowsNamingIt) {
  float dummy = 0.0f;
  test::expect_error_naming([&] { kernels::launch_cast(&dummy, DType::u8, &dummy, DType::f32, 1, nullptr); }, "u8");
  test::expect_error_naming([&] { kernels::launch_cast(&dummy, DType::f32, &dummy, DType::i32, 1, nullptr); }, "i32");
}

}  // namespace
}  // namespace ringtrain
