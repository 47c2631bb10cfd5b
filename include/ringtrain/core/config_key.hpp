// Config keys, each declared once: name, type, default, allowed values and a one-line doc. A key
// object is what a reader passes to Config::get and, through the registry, one row of
// `ringtrain config keys` (the README's table). Keys are declared at namespace scope in the file
// that reads them and register themselves when constructed; they are never copied or moved.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ringtrain {

enum class KeyType { integer, number, boolean, string, integer_list, number_list, string_list };
std::string_view key_type_name(KeyType type);  // "integer", "number", ..., "string list"

// Allowed numeric values (for lists: of every element); the default allows any.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;

  static Range at_least(double v) { return {v}; }
  static Range above(double v) { return {v, std::numeric_limits<double>::infinity(), true}; }
  static Range between(double lo, double hi) { return {lo, hi}; }
  static Range fraction() { return {0.0, 1.0, false, true}; }  // [0, 1)
  bool contains(double v) const;
  bool unbounded() const;
  std::string str() const;          // ">= 1", "> 0", "[0, 1)", "[0, 1024]"; "" when unbounded
  std::string requirement() const;  // ">= 1", "in [0, 1)": what "must be" is followed by
};

// A key that is read only for some values of another key (optim.momentum only when optim.name
// is "sgd"): an unread key set by the user is reported with this condition instead of as unknown.
struct KeyCondition {
  std::string key;  // full name; for keys of [[model.layers]] tables relative to the same table
  std::vector<std::string> values;
};

// Everything `ringtrain config keys` prints about a key.
struct KeyInfo {
  std::string name;  // full dotted name; keys of [[model.layers]] tables are "model.layers[].out"
  KeyType type = KeyType::string;
  std::string default_text;  // markdown: "`1`", a documented computed default, or "(required)"
  std::string allowed;       // "" when any value of the type is allowed
  std::string doc;
  KeyCondition read_when;  // empty key: always read
};

// The declared keys in table order (sections as a run file lists them, then declaration order).
std::vector<const KeyInfo*> registered_keys();
const KeyInfo* find_registered_key(std::string_view name);  // "model.layers[3].out" finds "model.layers[].out"
std::string nearest_registered_key(std::string_view name);  // "" when nothing is close
// The markdown table of every key, as the README holds it.
std::string config_keys_markdown();

// How a key is declared: KeyDecl{.name = "train.epochs", .doc = "...", .range = Range::at_least(1)}.
struct KeyDecl {
  std::string_view name;
  std::string_view doc;
  Range range = {};
  bool required = false;
  std::string_view default_doc = {};  // documented default when the value is computed (e.g. from run.dir)
  KeyCondition read_when = {};
};

class KeyBase {
 public:
  KeyBase(const KeyBase&) = delete;
  KeyBase& operator=(const KeyBase&) = delete;
  const KeyInfo& info() const { return info_; }
  const std::string& name() const { return info_.name; }
  const Range& range() const { return range_; }
  bool required() const { return required_; }

 protected:
  KeyBase(const KeyDecl& decl, KeyType type, const std::string& default_text, std::string allowed);
  ~KeyBase() = default;

 private:
  KeyInfo info_;
  Range range_;
  bool required_;
};

// T: std::int64_t, double, bool, std::string or a std::vector of the first, second or fourth.
template <typename T>
class Key final : public KeyBase {
 public:
  Key(const KeyDecl& decl, T fallback);
  const T& fallback() const { return fallback_; }

 private:
  T fallback_;
};
using IntKey = Key<std::int64_t>;
using NumberKey = Key<double>;
using BoolKey = Key<bool>;
using StringKey = Key<std::string>;
using IntListKey = Key<std::vector<std::int64_t>>;
using NumberListKey = Key<std::vector<double>>;
using StringListKey = Key<std::vector<std::string>>;

// A string key with a fixed set of spellings, each mapped to a value of E.
template <typename E>
class EnumKey final : public KeyBase {
 public:
  using Choices = std::vector<std::pair<std::string, E>>;
  EnumKey(const KeyDecl& decl, const E& fallback, Choices choices)
      : KeyBase(decl, KeyType::string, quoted(spelling_of(choices, fallback)), choices_text(choices)),
        fallback_(fallback),
        choices_(std::move(choices)) {}
  E fallback() const { return fallback_; }
  const Choices& choices() const { return choices_; }
  const std::string& spelling(const E& value) const { return spelling_of(choices_, value); }

 private:
  static const std::string& spelling_of(const Choices& choices, const E& value) {
    for (const auto& [s, v] : choices)
      if (v == value) return s;
    return choices.front().first;
  }
  static std::string quoted(const std::string& s) { return "\"" + s + "\""; }
  static std::string choices_text(const Choices& choices) {
    std::string out;
    for (const auto& [s, v] : choices) out += (out.empty() ? "" : ", ") + quoted(s);
    return out;
  }
  E fallback_;
  Choices choices_;
};

}  // namespace ringtrain
