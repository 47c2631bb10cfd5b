// The registry of declared config keys, their documented defaults and ranges, the markdown
// table `ringtrain config keys` prints, and the nearest declared key for a misspelt one.
#include "ringtrain/core/config_key.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>

namespace ringtrain {
namespace {

std::vector<const KeyInfo*>& registry() {
  static std::vector<const KeyInfo*> keys;  // function-local: safe from any static initializer
  return keys;
}

// The order a run file lists its sections in; the table follows it.
int section_rank(std::string_view name) {
  static constexpr std::array<std::string_view, 11> kSections = {
      "run", "train", "loss_scale", "checkpoint", "data", "model", "optim", "prune", "runtime", "comm", "monitor"};
  const std::string_view section = name.substr(0, name.find('.'));
  const auto it = std::find(kSections.begin(), kSections.end(), section);
  return static_cast<int>(it - kSections.begin());
}

// "model.layers[2].out" -> "model.layers[].out"
std::string without_indices(std::string_view name) {
  std::string out;
  for (std::size_t i = 0; i < name.size(); ++i) {
    out += name[i];
    if (name[i] == '[') {
      const auto close = name.find(']', i);
      if (close == std::string_view::npos) return std::string(name);
      out += ']';
      i = close;
    }
  }
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string format_number(double v) {
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  return fmt::format("{}", v);
}

template <typename T>
std::string default_text(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return "\"" + v + "\"";
  } else if constexpr (std::is_arithmetic_v<T>) {
    return format_number(static_cast<double>(v));
  } else {
    std::string out;
    for (const auto& e : v) out += (out.empty() ? "" : ", ") + default_text(e);
    return "[" + out + "]";
  }
}

template <typename T>
constexpr KeyType type_of() {
  if constexpr (std::is_same_v<T, std::int64_t>) return KeyType::integer;
  if constexpr (std::is_same_v<T, double>) return KeyType::number;
  if constexpr (std::is_same_v<T, bool>) return KeyType::boolean;
  if constexpr (std::is_same_v<T, std::string>) return KeyType::string;
  if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) return KeyType::integer_list;
  if constexpr (std::is_same_v<T, std::vector<double>>) return KeyType::number_list;
  if constexpr (std::is_same_v<T, std::vector<std::string>>) return KeyType::string_list;
}

// A markdown table cell: pipes escaped, no line breaks.
std::string cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n')
      out += ' ';
    else
      out += c;
  }
  return out;
}

}  // namespace

std::string_view key_type_name(KeyType type) {
  switch (type) {
    case KeyType::integer: return "integer";
    case KeyType::number: return "number";
    case KeyType::boolean: return "boolean";
    case KeyType::string: return "string";
    case KeyType::integer_list: return "integer list";
    case KeyType::number_list: return "number(s)";
    case KeyType::string_list: return "string(s)";
  }
  return "?";
}

// A bounded key never takes NaN or an infinity (a timeout of inf would never fire).
bool Range::contains(double v) const {
  if (!std::isfinite(v)) return unbounded();
  const bool above_lo = lo_open ? v > lo : v >= lo;
  const bool below_hi = hi_open ? v < hi : v <= hi;
  return above_lo && below_hi;
}

bool Range::unbounded() const { return std::isinf(lo) && std::isinf(hi); }

std::string Range::str() const {
  if (unbounded()) return "";
  if (std::isinf(hi)) return fmt::format("{} {}", lo_open ? ">" : ">=", format_number(lo));
  if (std::isinf(lo)) return fmt::format("{} {}", hi_open ? "<" : "<=", format_number(hi));
  return fmt::format("{}{}, {}{}", lo_open ? "(" : "[", format_number(lo), format_number(hi), hi_open ? ")" : "]");
}

std::string Range::requirement() const {
  const std::string bounds = str();
  return bounds.empty() || bounds[0] == '<' || bounds[0] == '>' ? bounds : "in " + bounds;
}

KeyBase::KeyBase(const KeyDecl& decl, KeyType type, const std::string& default_text, std::string allowed)
    : range_(decl.range), required_(decl.required) {
  info_.name = std::string(decl.name);
  info_.type = type;
  // Markdown already: a literal default in backticks, a documented one as written.
  info_.default_text = decl.required              ? "(required)"
                       : decl.default_doc.empty() ? "`" + default_text + "`"
                                                  : std::string(decl.default_doc);
  info_.allowed = allowed.empty() ? decl.range.str() : std::move(allowed);
  info_.doc = std::string(decl.doc);
  info_.read_when = decl.read_when;
  registry().push_back(&info_);
}

template <typename T>
Key<T>::Key(const KeyDecl& decl, T fallback)
    : KeyBase(decl, type_of<T>(), default_text(fallback), ""), fallback_(std::move(fallback)) {}

template class Key<std::int64_t>;
template class Key<double>;
template class Key<bool>;
template class Key<std::string>;
template class Key<std::vector<std::int64_t>>;
template class Key<std::vector<double>>;
template class Key<std::vector<std::string>>;

std::vector<const KeyInfo*> registered_keys() {
  std::vector<const KeyInfo*> keys = registry();
  std::stable_sort(keys.begin(), keys.end(),
                   [](const KeyInfo* a, const KeyInfo* b) { return section_rank(a->name) < section_rank(b->name); });
  return keys;
}

const KeyInfo* find_registered_key(std::string_view name) {
  const std::string plain = without_indices(name);
  for (const KeyInfo* k : registry())
    if (k->name == plain) return k;
  return nullptr;
}

std::string nearest_registered_key(std::string_view name) {
  const std::string plain = without_indices(name);
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, plain.size() / 4) + 1;  // further away is no suggestion
  for (const KeyInfo* k : registry()) {
    const std::size_t d = edit_distance(plain, k->name);
    if (d < best_distance) best_distance = d, best = k->name;
  }
  if (best.empty() || plain == name) return best;
  // Put the user's index back: "model.layers[2].kernal" -> "model.layers[2].kernel".
  const auto open = name.find('[');
  const auto close = name.find(']', open);
  const auto slot = best.find("[]");
  if (open == std::string_view::npos || close == std::string_view::npos || slot == std::string::npos) return best;
  return best.substr(0, slot) + std::string(name.substr(open, close - open + 1)) + best.substr(slot + 2);
}

std::string config_keys_markdown() {
  std::string out = "| key | type | default | allowed | meaning |\n| --- | --- | --- | --- | --- |\n";
  for (const KeyInfo* k : registered_keys()) {
    std::string meaning = k->doc;
    if (!k->read_when.key.empty()) {
      std::string values;
      for (const auto& v : k->read_when.values) values += (values.empty() ? "\"" : ", \"") + v + "\"";
      meaning = fmt::format("({} {}) {}", k->read_when.key, values, meaning);
    }
    out += fmt::format("| `{}` | {} | {} | {} | {} |\n", k->name, key_type_name(k->type), cell(k->default_text),
                       cell(k->allowed), cell(meaning));
  }
  return out;
}

}  // namespace ringtrain
