// Private: a screen in front of toml++. Debian 12's toml++ 3.3.0 reaches __builtin_unreachable
// (undefined behaviour) when it asks whether some non-ASCII characters are whitespace: wherever
// the grammar allows whitespace (a line's start, around `=`, after a value, after a line-ending
// backslash in a multi-line string). Found by fuzzing (tests/fuzz; upstream
// marzer/tomlplusplus#295, fixed after 3.3.0). TOML allows non-ASCII characters only inside
// strings and comments, so one anywhere else is a syntax error anyway: this finds it before
// toml++ sees the text. It narrows the defect, it does not close it: where toml++ does not
// take a quote for a string's start (`0."""` in a malformed value) it still tests what follows.
#pragma once
#include <cstddef>
#include <string_view>

namespace ringtrain::toml_screen {

struct Position {
  std::size_t line = 0;  // 1-based; 0: nothing found
  std::size_t column = 0;
};

// The first non-ASCII byte outside a string or comment, or after a line-ending backslash of a
// multi-line basic string before its next non-blank character; line 0 when there is none.
Position first_unsafe_non_ascii(std::string_view text);

}  // namespace ringtrain::toml_screen
