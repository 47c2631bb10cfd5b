// What every RT_<LIBRARY>_CHECK macro (check/*_check.hpp) throws when a call fails: one line,
// "<call> failed (<file>:<line>): <the library's words>", the file from below src/. Each macro is
// an expression, ::ringtrain::check::<library>((call), #call, __FILE__, __LINE__).
#pragma once
#include <string>
#include <string_view>

#include "ringtrain/core/error.hpp"

namespace ringtrain::check {

// Source paths shortened to the part below src/ so messages stay one readable line.
constexpr std::string_view short_source(std::string_view file) {
  const auto pos = file.rfind("src/");
  return pos == std::string_view::npos ? file : file.substr(pos + 4);
}

inline std::string failure_message(std::string_view call, std::string_view file, int line, std::string_view what) {
  return fmt::format("{} failed ({}:{}): {}", call, short_source(file), line, what);
}

// Throws E (an Error of the library's kind) with the message above.
template <typename E>
[[noreturn]] void fail(std::string_view call, std::string_view file, int line, std::string_view what) {
  throw E(failure_message(call, file, line, what));
}

}  // namespace ringtrain::check
