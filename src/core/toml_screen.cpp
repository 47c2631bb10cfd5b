// toml_screen::first_unsafe_non_ascii (see header): a small lexer that only knows where TOML's
// strings and comments begin and end.
#include "core/toml_screen.hpp"

namespace ringtrain::toml_screen {
namespace {

enum class State { plain, comment, basic, literal, multi_basic, multi_literal, trimming };

bool non_ascii(char c) { return static_cast<unsigned char>(c) >= 0x80; }

}  // namespace

Position first_unsafe_non_ascii(std::string_view text) {
  State state = State::plain;
  Position at{1, 1};
  const auto starts = [&](std::size_t i, std::string_view s) { return text.substr(i, s.size()) == s; };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    switch (state) {
      case State::plain:
        if (non_ascii(c)) return at;
        if (c == '#') {
          state = State::comment;
        } else if (starts(i, R"(""")")) {
          state = State::multi_basic;
          i += 2;
          at.column += 2;
        } else if (starts(i, "'''")) {
          state = State::multi_literal;
          i += 2;
          at.column += 2;
        } else if (c == '"') {
          state = State::basic;
        } else if (c == '\'') {
          state = State::literal;
        }
        break;
      case State::comment:
        if (c == '\n') state = State::plain;
        break;
      case State::basic:
        if (c == '\\') {
          ++i;  // the escaped character (a newline here is toml++'s error to report)
          ++at.column;
        } else if (c == '"' || c == '\n') {
          state = State::plain;
        }
        break;
      case State::literal:
        if (c == '\'' || c == '\n') state = State::plain;
        break;
      case State::multi_basic:
        if (starts(i, R"(""")")) {
          state = State::plain;
          i += 2;
          at.column += 2;
        } else if (c == '\\') {
          // A line-ending backslash: toml++ trims the blanks and newlines after it.
          std::size_t j = i + 1;
          while (j < text.size() && (text[j] == ' ' || text[j] == '\t')) ++j;
          if (j < text.size() && (text[j] == '\n' || text[j] == '\r')) {
            state = State::trimming;
          } else {
            ++i;
            ++at.column;
          }
        }
        break;
      case State::multi_literal:
        if (starts(i, "'''")) {
          state = State::plain;
          i += 2;
          at.column += 2;
        }
        break;
      case State::trimming:
        if (non_ascii(c)) return at;
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
          state = State::multi_basic;
          --i;  // this character belongs to the string again
          continue;
        }
        break;
    }
    if (c == '\n') {
      ++at.line;
      at.column = 1;
    } else {
      ++at.column;
    }
  }
  return Position{};
}

}  // namespace ringtrain::toml_screen
