// printable(): file-derived text made safe to quote in a one-line message (printable.hpp).
#include "ringtrain/core/printable.hpp"

#include <fmt/format.h>

namespace ringtrain {

std::string printable(std::string_view text) {
  constexpr std::size_t kMaxBytes = 200;
  std::string out;
  for (const char c : text.substr(0, kMaxBytes)) {
    const auto byte = static_cast<unsigned char>(c);
    out += byte < 0x20 || byte >= 0x7f ? fmt::format("\\x{:02x}", byte) : std::string(1, c);
  }
  return text.size() > kMaxBytes ? out + "..." : out;
}

}  // namespace ringtrain
