// Test hooks for fault-injection tests (docs/RELIABILITY.md): an environment variable set to
// "<point>@<n>" makes the process raise a signal at that point when the number there is n (the
// step being saved, the rank), so a crash or a stall lands in a chosen window deterministically.
// Unset, a hook costs one cached getenv.
#pragma once
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace ringtrain {

// Raises `signal` when the variable `variable` is "<point>@<n>".
inline void test_hook(const char* variable, const char* point, std::int64_t n, int signal) {
  const char* spec = std::getenv(variable);
  if (spec != nullptr && std::string(spec) == std::string(point) + "@" + std::to_string(n)) std::raise(signal);
}

}  // namespace ringtrain
