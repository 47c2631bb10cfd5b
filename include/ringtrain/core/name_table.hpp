// Names of a small set of choices (an enum's values, a CLI option's words), kept in one
// constexpr table of {name, value} pairs per set, so that parsing, printing and the list the
// CLI offers (and names in its errors) cannot drift apart.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ringtrain {

template <typename T>
using NameTable = std::pair<std::string_view, T>;

// The value named `name`, or nothing for a name the table does not hold.
template <typename T, std::size_t N>
std::optional<T> value_of_name(const NameTable<T> (&table)[N], std::string_view name) {
  for (const auto& [n, v] : table)
    if (n == name) return v;
  return std::nullopt;
}

// The name of `value` ("?" for a value the table does not hold).
template <typename T, std::size_t N>
std::string_view name_of_value(const NameTable<T> (&table)[N], const T& value) {
  for (const auto& [n, v] : table)
    if (v == value) return n;
  return "?";
}

// Every name, in the table's order.
template <typename T, std::size_t N>
std::vector<std::string> names_of(const NameTable<T> (&table)[N]) {
  std::vector<std::string> names;
  names.reserve(N);
  for (const auto& [n, v] : table) names.emplace_back(n);
  return names;
}

}  // namespace ringtrain
