// libFuzzer target for the TOML config layer (Config::parse and the emitter that writes
// run.dir/config.toml): any input either parses or is a ConfigError, never a crash, a leak or
// undefined behaviour (built with ASan and UBSan by tools/fuzz/run), and what ringtrain emits
// for a config it accepted reads back as the same config.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string emitted;
  try {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    emitted = ringtrain::Config::parse(text, "fuzz.toml").to_toml();
  } catch (const ringtrain::ConfigError&) {
    return 0;
  }
  if (ringtrain::Config::parse(emitted, "emitted.toml").to_toml() != emitted) std::abort();
  return 0;
}
