// format_bytes (see header).
#include "ringtrain/core/bytes.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>

namespace ringtrain {

std::string format_bytes(double bytes) {
  constexpr std::array<const char*, 6> kUnits{"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t unit = 0;
  while (unit + 1 < kUnits.size() && std::fabs(bytes) >= 1024.0) {
    bytes /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, kUnits[unit]);
}

}  // namespace ringtrain
