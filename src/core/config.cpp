// Config on top of toml++. All keys are dotted paths relative to this Config's table; the
// shared State owns the document and the set of keys read, for unknown-key detection.
#include "ringtrain/core/config.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <type_traits>
#include <toml++/toml.h>

#include "ringtrain/core/error.hpp"

namespace ringtrain {

struct Config::State {
  toml::table root;
  std::string source;
  std::set<std::string> used;  // full dotted paths that were read
};

namespace {

std::vector<std::string> split_key(std::string_view key) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const auto dot = key.find('.', start);
    parts.emplace_back(key.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  for (const auto& p : parts) RT_REQUIRE(!p.empty(), ConfigError, "config: malformed key '{}'", key);
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

// "train.epochs=3" -> sets root.train.epochs = 3 (TOML value syntax; bare words are strings).
void apply_override(toml::table& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  RT_REQUIRE(eq != std::string::npos && eq > 0, ConfigError, "--set '{}': expected key=value (e.g. train.epochs=3)",
             assignment);
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + text);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", text}};  // not TOML syntax: take it as a plain string
  }
  const auto parts = split_key(key);
  toml::table* table = &root;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    toml::node* next = table->get(parts[i]);
    if (next == nullptr) {
      table->insert(parts[i], toml::table{});
      next = table->get(parts[i]);
    }
    RT_REQUIRE(next->is_table(), ConfigError, "--set {}: '{}' is a {}, not a table", key, parts[i], type_name(*next));
    table = next->as_table();
  }
  table->insert_or_assign(parts.back(), *parsed.get("v"));
}

void collect_unknown(const toml::table& table, const std::string& prefix, const std::set<std::string>& used,
                     std::vector<std::string>& unknown) {
  for (const auto& [k, v] : table) {
    const std::string path = prefix + std::string(k.str());
    if (v.is_table()) {
      collect_unknown(*v.as_table(), path + ".", used, unknown);
    } else if (v.is_array_of_tables() && used.count(path)) {
      const auto& arr = *v.as_array();
      for (std::size_t i = 0; i < arr.size(); ++i)
        collect_unknown(*arr[i].as_table(), path + "[" + std::to_string(i) + "].", used, unknown);
    } else if (!used.count(path)) {
      unknown.push_back(path);
    }
  }
}

}  // namespace

Config::Config(std::shared_ptr<State> state, void* table, std::string prefix)
    : state_(std::move(state)), table_(table), prefix_(std::move(prefix)) {}

Config Config::parse(std::string_view text, const std::string& source, const std::vector<std::string>& overrides) {
  auto state = std::make_shared<State>();
  state->source = source;
  try {
    state->root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw ConfigError(
        fmt::format("config: {}:{}:{}: {}", source, e.source().begin.line, e.source().begin.column, e.description()));
  }
  for (const auto& o : overrides) apply_override(state->root, o);
  void* root = &state->root;
  return Config(std::move(state), root, "");
}

Config Config::load_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  RT_REQUIRE(std::filesystem::is_regular_file(path, ec), ConfigError, "config: {}: no such file", path);
  std::ifstream in(path);
  RT_REQUIRE(in.good(), ConfigError, "config: {}: cannot open for reading", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse(buffer.str(), path, overrides);
}

std::string Config::path_of(std::string_view key) const { return prefix_ + std::string(key); }
const std::string& Config::source() const { return state_->source; }

void* Config::node(std::string_view key) const {
  const auto parts = split_key(key);
  toml::node* n = static_cast<toml::table*>(table_);
  for (const auto& p : parts) {
    if (n == nullptr || !n->is_table()) return nullptr;
    n = n->as_table()->get(p);
  }
  if (n != nullptr && !n->is_table()) state_->used.insert(path_of(key));
  return n;
}

bool Config::has(std::string_view key) const { return node(key) != nullptr; }

void* Config::insert_default(std::string_view key, void* value_node) {
  const auto parts = split_key(key);
  toml::table* table = static_cast<toml::table*>(table_);
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    toml::node* next = table->get(parts[i]);
    if (next == nullptr) {
      table->insert(parts[i], toml::table{});
      next = table->get(parts[i]);
    }
    RT_REQUIRE(next->is_table(), ConfigError, "config: {}: '{}' must be a table", source(), path_of(key));
    table = next->as_table();
  }
  table->insert_or_assign(parts.back(), std::move(*static_cast<toml::node*>(value_node)));
  state_->used.insert(path_of(key));
  return table->get(parts.back());
}

namespace {
[[noreturn]] void wrong_type(const Config& c, std::string_view key, const char* expected, const toml::node& n) {
  throw ConfigError(
      fmt::format("config: {}: key '{}': expected {}, got {}", c.source(), c.path_of(key), expected, describe(n)));
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

std::int64_t Config::get_int(std::string_view key, std::int64_t fallback) {
  auto* n = static_cast<toml::node*>(node(key));
  if (n == nullptr) return with_default(key, fallback);
  if (!n->is_integer()) wrong_type(*this, key, "an integer", *n);
  return n->as_integer()->get();
}

double Config::get_double(std::string_view key, double fallback) {
  auto* n = static_cast<toml::node*>(node(key));
  if (n == nullptr) return with_default(key, fallback);
  if (n->is_integer()) return static_cast<double>(n->as_integer()->get());
  if (!n->is_floating_point()) wrong_type(*this, key, "a number", *n);
  return n->as_floating_point()->get();
}

bool Config::get_bool(std::string_view key, bool fallback) {
  auto* n = static_cast<toml::node*>(node(key));
  if (n == nullptr) return with_default(key, fallback);
  if (!n->is_boolean()) wrong_type(*this, key, "true or false", *n);
  return n->as_boolean()->get();
}

std::string Config::get_string(std::string_view key, const std::string& fallback) {
  auto* n = static_cast<toml::node*>(node(key));
  if (n == nullptr) return with_default(key, fallback);
  if (!n->is_string()) wrong_type(*this, key, "a string", *n);
  return n->as_string()->get();
}

std::vector<std::int64_t> Config::get_int_list(std::string_view key, const std::vector<std::int64_t>& fallback) {
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

// One T or an array of T (numbers: integers accepted for doubles), as get_double_list and
// get_string_list read them; `expected` names the accepted form in the error.
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

std::vector<double> Config::get_double_list(std::string_view key, const std::vector<double>& fallback) {
  auto* n = static_cast<toml::node*>(node(key));
  if (n == nullptr) return with_default(key, fallback);
  return one_or_list<double>(*this, n, key, "a number or an array of numbers");
}

std::vector<std::string> Config::get_string_list(std::string_view key, const std::vector<std::string>& fallback) {
  auto* n = static_cast<toml::node*>(node(key));
  if (n == nullptr) return with_default(key, fallback);
  return one_or_list<std::string>(*this, n, key, "a string or an array of strings");
}

std::int64_t Config::require_int(std::string_view key) {
  RT_REQUIRE(has(key), ConfigError, "config: {}: missing required key '{}'", source(), path_of(key));
  return get_int(key, 0);
}

std::string Config::require_string(std::string_view key) {
  RT_REQUIRE(has(key), ConfigError, "config: {}: missing required key '{}'", source(), path_of(key));
  return get_string(key, "");
}

Config Config::section(std::string_view key) {
  const auto parts = split_key(key);
  toml::table* table = static_cast<toml::table*>(table_);
  for (const auto& p : parts) {
    toml::node* next = table->get(p);
    if (next == nullptr) {
      table->insert(p, toml::table{});
      next = table->get(p);
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
  for (std::size_t i = 0; i < arr.size(); ++i)
    out.push_back(Config(state_, arr[i].as_table(), path_of(key) + "[" + std::to_string(i) + "]."));
  return out;
}

void Config::finish() const {
  std::vector<std::string> unknown;
  collect_unknown(state_->root, "", state_->used, unknown);
  if (unknown.empty()) return;
  std::string list;
  for (std::size_t i = 0; i < unknown.size(); ++i) list += (i ? ", " : "") + unknown[i];
  throw ConfigError(fmt::format("config: {}: unknown key{} {}", source(), unknown.size() > 1 ? "s" : "", list));
}

std::string Config::to_toml() const {
  std::ostringstream os;
  os << state_->root;
  return os.str();
}

}  // namespace ringtrain
