// Config on top of toml++. Readers address keys by declared name relative to a Config's table;
// the shared State owns the document, the keys read (for unknown-key detection) and the keys
// the command line set (so a message can say where a stray key came from).
#include "ringtrain/core/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <toml++/toml.h>
#include <type_traits>

#include "core/toml_screen.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {

struct Config::State {
  toml::table root;
  std::string source;
  std::set<std::string> used;      // full dotted paths that were read
  std::set<std::string> from_set;  // full dotted paths given by --set
};

namespace {

// One dotted component: "layers[2]" is the name "layers" and the index 2.
struct KeyPart {
  std::string name;
  std::optional<std::size_t> index;
};

std::vector<KeyPart> split_key(std::string_view key, std::string_view context) {
  std::vector<KeyPart> parts;
  std::size_t start = 0;
  while (true) {
    const auto dot = key.find('.', start);
    std::string text(key.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    KeyPart part;
    if (const auto open = text.find('['); open != std::string::npos && text.back() == ']') {
      const std::string digits = text.substr(open + 1, text.size() - open - 2);
      RT_REQUIRE(!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos && digits.size() < 10,
                 ConfigError, "{}: malformed key '{}' (an index is [0], [1], ...)", context, key);
      part.index = std::stoul(digits);
      text.resize(open);
    }
    RT_REQUIRE(!text.empty() && text.find_first_of("[]") == std::string::npos, ConfigError, "{}: malformed key '{}'",
               context, key);
    part.name = std::move(text);
    parts.push_back(std::move(part));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts;
}

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::array: return "array";
    case toml::node_type::table: return "table";
    default: return "date/time";
  }
}

std::string describe(const toml::node& n) {
  std::ostringstream os;
  n.visit([&](auto&& v) { os << v; });
  std::string s = os.str();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return type_name(n) + " " + s;
}

// The table a key's last part lives in, walking (and with `create`, making) the parts before
// it; an indexed part steps into an array of tables. Null when absent and not created.
toml::table* parent_table(toml::table& root, const std::vector<KeyPart>& parts, bool create, std::string_view key,
                          std::string_view context) {
  toml::table* table = &root;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string& name = parts[i].name;
    const std::optional<std::size_t> index = parts[i].index;
    toml::node* next = table->get(name);
    if (next == nullptr) {
      if (!create || index) return nullptr;
      table->insert(name, toml::table{});
      next = table->get(name);
    }
    if (index) {
      RT_REQUIRE(next->is_array_of_tables(), ConfigError, "{}: '{}' is a {}, not an array of tables ([[{}]])", context,
                 name, type_name(*next), name);
      toml::array& arr = *next->as_array();
      RT_REQUIRE(*index < arr.size(), ConfigError, "{}: '{}' has {} table{}, no index {}", context, name, arr.size(),
                 arr.size() == 1 ? "" : "s", *index);
      next = arr.get(*index);
    }
    RT_REQUIRE(next->is_table(), ConfigError, "{}: '{}' in '{}' is a {}, not a table", context, name, key,
               type_name(*next));
    table = next->as_table();
  }
  RT_REQUIRE(!parts.back().index, ConfigError, "{}: '{}' must name a key, not a table of an array", context, key);
  return table;
}

// "train.epochs=3" -> root.train.epochs = 3 (TOML value syntax; a bare word is a string).
std::string apply_set(toml::table& root, const std::string& assignment) {
  const std::string context = "--set '" + assignment + "'";
  const auto eq = assignment.find('=');
  RT_REQUIRE(eq != std::string::npos && eq > 0, ConfigError, "{}: expected key=value (e.g. train.epochs=3)", context);
  std::string key = assignment.substr(0, eq);  // not const: returned, so moved
  const std::string text = assignment.substr(eq + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + text);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", text}};  // not TOML syntax: take it as a plain string
  }
  const auto parts = split_key(key, context);
  toml::table* table = parent_table(root, parts, true, key, context);
  RT_REQUIRE(table != nullptr, ConfigError, "{}: the config has no '{}'", context, key);
  table->insert_or_assign(parts.back().name, *parsed.get("v"));
  return key;
}

void apply_unset(toml::table& root, const std::string& key) {
  const std::string context = "--unset '" + key + "'";
  const auto parts = split_key(key, context);
  toml::table* table = parent_table(root, parts, false, key, context);
  RT_REQUIRE(table != nullptr && table->contains(parts.back().name), ConfigError, "{}: the config has no such key",
             context);
  table->erase(parts.back().name);
}

void collect_unread(const toml::table& table, const std::string& prefix, const std::set<std::string>& used,
                    std::vector<std::string>& unread) {
  for (const auto& [k, v] : table) {
    const std::string path = prefix + std::string(k.str());
    if (v.is_table()) {
      collect_unread(*v.as_table(), path + ".", used, unread);
    } else if (v.is_array_of_tables() && used.count(path)) {
      const auto& arr = *v.as_array();
      for (std::size_t i = 0; i < arr.size(); ++i)
        collect_unread(*arr[i].as_table(), path + "[" + std::to_string(i) + "].", used, unread);
    } else if (!used.count(path)) {
      unread.push_back(path);
    }
  }
}

// The value at a full dotted path (indices allowed), or null.
const toml::node* find_path(toml::table& root, std::string_view path) {
  const auto parts = split_key(path, "config");
  toml::table* table = parent_table(root, parts, false, path, "config");
  return table ? table->get(parts.back().name) : nullptr;
}

// Why `path` (set but never read) is refused, in words.
std::string unread_reason(toml::table& root, const std::string& path) {
  if (const KeyInfo* key = find_registered_key(path)) {
    const KeyCondition& when = key->read_when;
    if (when.key.empty()) return fmt::format("key '{}' is not used by this config", path);
    std::string condition = when.key;  // a key of the same [[model.layers]] table: that table's index
    if (const auto open = condition.find("[]"); open != std::string::npos)
      condition = path.substr(0, path.find(']', open) + 1) + condition.substr(open + 2);
    const toml::node* value = find_path(root, condition);
    std::string only;
    for (const auto& v : when.values) only += (only.empty() ? "\"" : ", \"") + v + "\"";
    std::string current = "(absent)";
    if (value != nullptr && value->is_string())
      current = "\"" + value->as_string()->get() + "\"";
    else if (value != nullptr)
      current = describe(*value).substr(type_name(*value).size() + 1);
    return fmt::format("key '{}' is not used by {} = {} (only by {})", path, condition, current, only);
  }
  const std::string nearest = nearest_registered_key(path);
  if (nearest.empty()) return fmt::format("unknown key '{}'", path);
  return fmt::format("unknown key '{}' (did you mean '{}'?)", path, nearest);
}

// A string as TOML text. toml++ 3.3.0 writes one with a control character (a newline, ...) as a
// multi-line """...""" string, where a leading newline is dropped when read back (found by
// fuzz_config), or, without multi-line strings, as a literal '...' string, which TOML forbids:
// such strings are written as basic "..." strings with escapes; the others as toml++ chooses.
void emit_string(std::ostream& os, const std::string& s) {
  const bool control = std::any_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
  constexpr toml::format_flags kBasicOnly = toml::toml_formatter::default_flags &
                                            ~toml::format_flags::allow_multi_line_strings &
                                            ~toml::format_flags::allow_literal_strings;
  os << toml::toml_formatter{toml::value<std::string>(s), control ? kBasicOnly : toml::toml_formatter::default_flags};
}

std::string quoted_key(std::string_view k) {
  const bool bare =
      !k.empty() &&
      k.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") == std::string_view::npos;
  if (bare) return std::string(k);
  std::ostringstream os;
  emit_string(os, std::string(k));
  return os.str();
}

// TOML text of one value; floats shortest round-trip (0.05, not 0.050000000000000003).
void emit_value(std::ostream& os, const toml::node& n) {
  if (n.is_floating_point()) {
    const double v = n.as_floating_point()->get();
    if (std::isnan(v)) {
      os << "nan";
    } else if (std::isinf(v)) {
      os << (v < 0 ? "-inf" : "inf");
    } else {
      std::string s = fmt::format("{}", v);
      if (s.find_first_of(".e") == std::string::npos) s += ".0";
      os << s;
    }
  } else if (n.is_array()) {
    os << "[";
    bool first = true;
    for (const auto& e : *n.as_array()) {
      os << (first ? " " : ", ");
      emit_value(os, e);
      first = false;
    }
    os << (first ? "]" : " ]");
  } else if (n.is_table()) {
    os << "{";  // an inline table (inside an array)
    bool first = true;
    for (const auto& [k, v] : *n.as_table()) {
      os << (first ? " " : ", ") << quoted_key(k.str()) << " = ";
      emit_value(os, v);
      first = false;
    }
    os << (first ? "}" : " }");
  } else if (n.is_string()) {
    emit_string(os, n.as_string()->get());
  } else {
    n.visit([&](auto&& v) { os << toml::toml_formatter{v}; });
  }
}

// A TOML text as a document; ConfigError naming `source` and the line:column of a syntax error.
toml::table parse_toml(std::string_view text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw ConfigError(
        fmt::format("config: {}:{}:{}: {}", source, e.source().begin.line, e.source().begin.column, e.description()));
  }
}

// Values first, then sub-tables ([a.b]) and arrays of tables ([[a.b]]), as TOML requires.
void emit_table(std::ostream& os, const toml::table& table, const std::string& path) {
  for (const auto& [k, v] : table) {
    if (v.is_table() || v.is_array_of_tables()) continue;
    os << quoted_key(k.str()) << " = ";
    emit_value(os, v);
    os << "\n";
  }
  for (const auto& [k, v] : table) {
    const std::string sub = path.empty() ? quoted_key(k.str()) : path + "." + quoted_key(k.str());
    if (v.is_table()) {
      os << "\n[" << sub << "]\n";
      emit_table(os, *v.as_table(), sub);
    } else if (v.is_array_of_tables()) {
      for (const auto& e : *v.as_array()) {
        os << "\n[[" << sub << "]]\n";
        emit_table(os, *e.as_table(), sub);
      }
    }
  }
}

}  // namespace

Config::Config(std::shared_ptr<State> state, void* table, std::string prefix)
    : state_(std::move(state)), table_(table), prefix_(std::move(prefix)) {}

Config Config::parse(std::string_view text, const std::string& source, const ConfigOverrides& overrides) {
  auto state = std::make_shared<State>();
  state->source = source;
  if (const toml_screen::Position p = toml_screen::first_unsafe_non_ascii(text); p.line != 0)
    throw ConfigError(
        fmt::format("config: {}:{}:{}: a non-ASCII character outside a string or comment", source, p.line, p.column));
  state->root = parse_toml(text, source);
  for (const auto& o : overrides.set) state->from_set.insert(apply_set(state->root, o));
  for (const auto& key : overrides.unset) apply_unset(state->root, key);
  void* root = &state->root;
  return Config(std::move(state), root, "");
}

Config Config::load_file(const std::string& path, const ConfigOverrides& overrides) {
  return parse(read_text(path), path, overrides);
}

std::string Config::read_text(const std::string& path) {
  constexpr std::uintmax_t kMaxBytes = std::uintmax_t{16} << 20;
  std::error_code ec;
  RT_REQUIRE(std::filesystem::is_regular_file(path, ec), ConfigError, "config: {}: no such file", path);
  const std::uintmax_t bytes = std::filesystem::file_size(path, ec);
  RT_REQUIRE(!ec && bytes <= kMaxBytes, ConfigError, "config: {}: {} bytes, more than the {} MiB a config may have",
             path, ec ? 0 : bytes, kMaxBytes >> 20);
  std::ifstream in(path);
  RT_REQUIRE(in.good(), ConfigError, "config: {}: cannot open for reading", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  RT_REQUIRE(!in.bad(), ConfigError, "config: {}: read failed", path);
  return buffer.str();
}

std::string Config::path_of(std::string_view key) const { return prefix_ + std::string(key); }
const std::string& Config::source() const { return state_->source; }

// A declared name relative to this table: "model.layers[].out" read from model.layers[2] is "out".
std::string Config::relative_name(const KeyBase& key) const {
  std::string scope;  // this table's prefix with indices dropped: "model.layers[]."
  for (std::size_t i = 0; i < prefix_.size(); ++i) {
    if (prefix_[i] == '[') {
      scope += "[]";
      i = prefix_.find(']', i);
    } else {
      scope += prefix_[i];
    }
  }
  if (key.name().rfind(scope, 0) == 0) return key.name().substr(scope.size());
  // A document rooted lower (a test's bare [[layers]] for model.layers[]): the scope's tail.
  if (const auto at = key.name().find("." + scope); !scope.empty() && at != std::string::npos)
    return key.name().substr(at + 1 + scope.size());
  throw std::logic_error(fmt::format("config key '{}' read from table '{}'", key.name(), prefix_));
}

void* Config::node(std::string_view key) const {
  const auto parts = split_key(key, "config");
  toml::node* n = static_cast<toml::table*>(table_);
  for (const auto& p : parts) {
    if (n == nullptr || !n->is_table()) return nullptr;
    n = n->as_table()->get(p.name);
  }
  if (n != nullptr && !n->is_table()) state_->used.insert(path_of(key));
  return n;
}

bool Config::has(std::string_view name) const { return node(name) != nullptr; }

void Config::require_present(std::string_view name) const {
  RT_REQUIRE(has(name), ConfigError, "config: {}: missing required key '{}'", source(), path_of(name));
}

void Config::check_range(const KeyBase& key, double value) const {
  if (!key.range().contains(value)) reject_range(key, fmt::format("{}", value));
}

void Config::check_range(const KeyBase& key, std::int64_t value) const {
  if (!key.range().contains(static_cast<double>(value))) reject_range(key, std::to_string(value));
}

std::string Config::set_note(const std::string& path) const {
  return state_->from_set.count(path) != 0 ? " (from --set)" : "";
}

void Config::reject_range(const KeyBase& key, const std::string& value) const {
  const std::string path = prefix_ + relative_name(key);
  throw ConfigError(fmt::format("config: {}: key '{}': must be {}, got {}{}", source(), path, key.range().requirement(),
                                value, set_note(path)));
}

void Config::reject_choice(const KeyBase& key, const std::string& spelling) const {
  const std::string path = prefix_ + relative_name(key);
  throw ConfigError(fmt::format("config: {}: key '{}': '{}' is not one of {}{}", source(), path, spelling,
                                key.info().allowed, set_note(path)));
}

void* Config::insert_default(std::string_view key, void* value_node) {
  const auto parts = split_key(key, "config");
  toml::table* table = static_cast<toml::table*>(table_);
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    toml::node* next = table->get(parts[i].name);
    if (next == nullptr) {
      table->insert(parts[i].name, toml::table{});
      next = table->get(parts[i].name);
    }
    RT_REQUIRE(next->is_table(), ConfigError, "config: {}: '{}' must be a table", source(), path_of(key));
    table = next->as_table();
  }
  table->insert_or_assign(parts.back().name, std::move(*static_cast<toml::node*>(value_node)));
  state_->used.insert(path_of(key));
  return table->get(parts.back().name);
}

namespace {
[[noreturn]] void wrong_type(const Config& c, std::string_view key, const char* expected, const toml::node& n) {
  throw ConfigError(fmt::format("config: {}: key '{}': expected {}, got {}{}", c.source(), c.path_of(key), expected,
                                describe(n), c.set_note(c.path_of(key))));
}
}  // namespace

// Records `fallback` as the value of an absent key (so the resolved config shows it) and
// returns it; lists become TOML arrays.
template <typename T>
T Config::with_default(std::string_view key, const T& fallback) {
  if constexpr (requires { fallback.begin(); } && !std::is_same_v<T, std::string>) {
    toml::array arr;
    for (const auto& x : fallback) arr.push_back(x);
    insert_default(key, &arr);
  } else {
    toml::value<T> v(fallback);
    insert_default(key, &v);
  }
  return fallback;
}

std::int64_t Config::read(std::string_view key, std::int64_t fallback) {
  auto* n = static_cast<toml::node*>(node(key));
  if (n == nullptr) return with_default(key, fallback);
  if (!n->is_integer()) wrong_type(*this, key, "an integer", *n);
  return n->as_integer()->get();
}

double Config::read(std::string_view key, double fallback) {
  auto* n = static_cast<toml::node*>(node(key));
  if (n == nullptr) return with_default(key, fallback);
  if (n->is_integer()) return static_cast<double>(n->as_integer()->get());
  if (!n->is_floating_point()) wrong_type(*this, key, "a number", *n);
  return n->as_floating_point()->get();
}

bool Config::read(std::string_view key, bool fallback) {
  auto* n = static_cast<toml::node*>(node(key));
  if (n == nullptr) return with_default(key, fallback);
  if (!n->is_boolean()) wrong_type(*this, key, "true or false", *n);
  return n->as_boolean()->get();
}

std::string Config::read(std::string_view key, const std::string& fallback) {
  auto* n = static_cast<toml::node*>(node(key));
  if (n == nullptr) return with_default(key, fallback);
  if (!n->is_string()) wrong_type(*this, key, "a string", *n);
  return n->as_string()->get();
}

std::vector<std::int64_t> Config::read(std::string_view key, const std::vector<std::int64_t>& fallback) {
  auto* n = static_cast<toml::node*>(node(key));
  if (n == nullptr) return with_default(key, fallback);
  if (!n->is_array()) wrong_type(*this, key, "an array of integers", *n);
  std::vector<std::int64_t> out;
  for (const auto& e : *n->as_array()) {
    if (!e.is_integer()) wrong_type(*this, key, "an array of integers", *n);
    out.push_back(e.as_integer()->get());
  }
  return out;
}

// One T or an array of T (numbers: integers accepted for doubles); `expected` names the
// accepted form in the error.
namespace {
template <typename T>
std::vector<T> one_or_list(Config& c, toml::node* n, std::string_view key, const char* expected) {
  auto one = [&](const toml::node& e) -> T {
    if constexpr (std::is_same_v<T, double>) {
      if (e.is_integer()) return static_cast<double>(e.as_integer()->get());
      if (e.is_floating_point()) return e.as_floating_point()->get();
    } else {
      if (e.is_string()) return e.as_string()->get();
    }
    wrong_type(c, key, expected, *n);
  };
  if (!n->is_array()) return {one(*n)};
  std::vector<T> out;
  for (const auto& e : *n->as_array()) out.push_back(one(e));
  return out;
}
}  // namespace

std::vector<double> Config::read(std::string_view key, const std::vector<double>& fallback) {
  auto* n = static_cast<toml::node*>(node(key));
  if (n == nullptr) return with_default(key, fallback);
  return one_or_list<double>(*this, n, key, "a number or an array of numbers");
}

std::vector<std::string> Config::read(std::string_view key, const std::vector<std::string>& fallback) {
  auto* n = static_cast<toml::node*>(node(key));
  if (n == nullptr) return with_default(key, fallback);
  return one_or_list<std::string>(*this, n, key, "a string or an array of strings");
}

Config Config::section(std::string_view key) {
  const auto parts = split_key(key, "config");
  toml::table* table = static_cast<toml::table*>(table_);
  for (const auto& p : parts) {
    toml::node* next = table->get(p.name);
    if (next == nullptr) {
      table->insert(p.name, toml::table{});
      next = table->get(p.name);
    }
    if (!next->is_table()) wrong_type(*this, key, "a table", *next);
    table = next->as_table();
  }
  return Config(state_, table, path_of(key) + ".");
}

std::vector<Config> Config::table_array(std::string_view key) {
  auto* n = static_cast<toml::node*>(node(key));
  RT_REQUIRE(n != nullptr, ConfigError, "config: {}: missing required key '{}'", source(), path_of(key));
  if (!n->is_array_of_tables() || n->as_array()->empty()) wrong_type(*this, key, "an array of tables ([[...]])", *n);
  state_->used.insert(path_of(key));
  std::vector<Config> out;
  auto& arr = *n->as_array();
  out.reserve(arr.size());
  for (std::size_t i = 0; i < arr.size(); ++i)
    out.push_back(Config(state_, arr[i].as_table(), path_of(key) + "[" + std::to_string(i) + "]."));
  return out;
}

void Config::finish() const {
  std::vector<std::string> unread;
  collect_unread(state_->root, "", state_->used, unread);
  if (unread.empty()) return;
  std::string list;
  for (const auto& path : unread) {
    list += list.empty() ? "" : "; ";
    list += unread_reason(state_->root, path);
    if (state_->from_set.count(path)) list += " (from --set)";
  }
  throw ConfigError(fmt::format("config: {}: {}", source(), list));
}

namespace {

std::string value_text(const toml::node& n) {
  std::ostringstream os;
  emit_value(os, n);
  return os.str();
}

void collect_changes(const toml::table& before, const toml::table& after, const std::string& path,
                     const std::vector<std::string>& ignored, std::vector<ConfigChange>& out) {
  for (const auto& [k, b] : before) {
    const toml::node* a = after.get(k.str());
    if (a == nullptr || std::find(ignored.begin(), ignored.end(), k.str()) != ignored.end()) continue;
    const std::string key = path + "." + std::string(k.str());
    if (b.is_table() && a->is_table()) {
      collect_changes(*b.as_table(), *a->as_table(), key, ignored, out);
    } else if (b.is_array_of_tables() && a->is_array_of_tables()) {
      const toml::array &bs = *b.as_array(), &as = *a->as_array();
      if (bs.size() != as.size()) {
        out.push_back({key, fmt::format("{} tables", bs.size()), fmt::format("{} tables", as.size())});
        continue;
      }
      for (std::size_t i = 0; i < bs.size(); ++i)
        collect_changes(*bs[i].as_table(), *as[i].as_table(), fmt::format("{}[{}]", key, i), ignored, out);
    } else if (const std::string bt = value_text(b), at = value_text(*a); bt != at) {
      out.push_back({key, bt, at});
    }
  }
}

}  // namespace

std::vector<ConfigChange> config_changes(std::string_view before, const std::string& before_source,
                                         std::string_view after, const std::string& after_source,
                                         std::string_view table, const std::vector<std::string>& ignored) {
  const toml::table b = parse_toml(before, before_source), a = parse_toml(after, after_source);
  std::vector<ConfigChange> out;
  const toml::table *bt = b.get_as<toml::table>(table), *at = a.get_as<toml::table>(table);
  if (bt != nullptr && at != nullptr) collect_changes(*bt, *at, std::string(table), ignored, out);
  return out;
}

std::string Config::to_toml() const {
  std::ostringstream os;
  emit_table(os, state_->root, "");
  std::string text = os.str();
  const auto first = text.find_first_not_of('\n');
  return first == std::string::npos ? std::string() : text.substr(first);
}

}  // namespace ringtrain
