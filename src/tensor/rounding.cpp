// round_in_place and has_nonfinite (see header). Both run over whole arenas every step, so
// the loops are written for the vectoriser: no early exit, no per-element calls it cannot inline.
#include "ringtrain/tensor/rounding.hpp"

#include <algorithm>
#include <cstring>

#include "ringtrain/core/error.hpp"

namespace ringtrain {

void round_in_place(float* x, std::int64_t n, DType to) {
  switch (to) {
    case DType::f32: return;
    case DType::bf16:
      for (std::int64_t i = 0; i < n; ++i) x[i] = bf16_to_float(float_to_bf16(x[i]));
      return;
    case DType::f16:
      for (std::int64_t i = 0; i < n; ++i) x[i] = f16_to_float(float_to_f16(x[i]));
      return;
    default: break;
  }
  throw Error(fmt::format("round_in_place: cannot round to {}", dtype_name(to)));
}

bool has_nonfinite(const float* x, std::int64_t n) {
  // The largest magnitude bit pattern: all-ones exponent (Inf, NaN) is >= 0x7f800000.
  std::uint32_t most = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, x + i, 4);
    most = std::max(most, u & 0x7fffffffu);
  }
  return most >= 0x7f800000u;
}

}  // namespace ringtrain
