// Private: checks of numeric command-line options whose errors read at a glance
// ("--steps: 'abc' is not an integer", "--seconds: 1e9 is outside 0.05 to 60"). CLI11's own
// Range says "Value abc not in range" of a word, and PositiveNumber prints DBL_MAX in full.
#pragma once
#include <CLI/CLI.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

namespace ringtrain {

// Why `value` (read from `text`) is not in [lo, hi]; an upper bound of T's largest value is no
// bound to speak of.
template <typename T>
std::string outside_message(const std::string& text, long double value, T lo, T hi) {
  if (hi != std::numeric_limits<T>::max()) return fmt::format("{} is outside {} to {}", text, lo, hi);
  return value < lo ? fmt::format("{} is below {}", text, lo) : fmt::format("{} is too large", text);
}

// Parses `text` as a T in [lo, hi] into `value`; returns why it is not one ("" when it is).
template <typename T>
std::string parse_number(const std::string& text, T lo, T hi, T& value) {
  if constexpr (std::is_unsigned_v<T>)  // CLI11 reads "-1" into an unsigned type as its largest value
    if (text.find('-') != std::string::npos) return outside_message(text, -1.0L, lo, hi);
  if (CLI::detail::lexical_cast(text, value)) {
    if constexpr (std::is_floating_point_v<T>)
      if (!std::isfinite(value)) return fmt::format("'{}' is not a finite number", text);
    return value >= lo && value <= hi ? std::string() : outside_message(text, value, lo, hi);
  }
  if constexpr (std::is_integral_v<T>) {
    long double wide = 0;  // digits too many for T ("1e3" is no integer here)
    const bool digits = !text.empty() && text.find_first_not_of("+-0123456789") == std::string::npos;
    if (digits && CLI::detail::lexical_cast(text, wide)) return outside_message(text, wide, lo, hi);
    return fmt::format("'{}' is not an integer", text);
  }
  return fmt::format("'{}' is not a number", text);
}

// A T in [lo, hi]; `also`, when given, says why an in-range value is still refused ("" if not).
template <typename T>
CLI::Validator number_in(T lo, T hi, std::function<std::string(T)> also = {}) {
  return CLI::Validator(
      [lo, hi, also = std::move(also)](std::string& text) {
        T value{};
        std::string error = parse_number(text, lo, hi, value);
        if (error.empty() && also) error = also(value);
        return error;
      },
      fmt::format("{} in [{} - {}]", CLI::detail::type_name<T>(), lo, hi));
}

// A T of at least `lo` (help: NONNEGATIVE for 0, POSITIVE for 1, as CLI11's own checks).
template <typename T>
CLI::Validator number_at_least(T lo) {
  const std::string name = lo == T{0} ? "NONNEGATIVE" : lo == T{1} ? "POSITIVE" : fmt::format("AT LEAST {}", lo);
  return number_in(lo, std::numeric_limits<T>::max()).description(name);
}

}  // namespace ringtrain
