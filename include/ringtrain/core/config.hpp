// Config: the TOML run configuration with `--set key=value` / `--unset key` overrides. Keys are
// read through their declarations (config_key.hpp): the getter checks type and range, records
// the key and inserts its default, so the resolved config is complete; finish() rejects any key
// nobody read, naming where it came from and the nearest declared key.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ringtrain/core/config_key.hpp"

namespace ringtrain {

// The command line's changes to a config file, applied in this order: sets, then unsets.
// A set is TOML `key=value` (a bare word is a string); keys of [[model.layers]] tables are
// reached by index (`model.layers[1].out=128`).
struct ConfigOverrides {
  std::vector<std::string> set;
  std::vector<std::string> unset;
};

class Config {
 public:
  // Throws ConfigError naming the file (and line:column for syntax errors) or the override.
  static Config load_file(const std::string& path, const ConfigOverrides& overrides = {});
  // A config file's text (at most 16 MiB: a config, not a stray large file). ConfigError naming it.
  static std::string read_text(const std::string& path);
  static Config parse(std::string_view text, const std::string& source, const ConfigOverrides& overrides = {});

  // The key's value; its default (inserted into the config) when absent. ConfigError naming the
  // key for a missing required key, a wrong type or a value outside the key's range.
  template <typename T>
  T get(const Key<T>& key) {
    return get(key, key.fallback());
  }
  // The same with a default computed by the caller (e.g. checkpoint.dir from run.dir).
  template <typename T>
  T get(const Key<T>& key, const T& fallback) {
    const std::string name = relative_name(key);
    if (key.required()) require_present(name);
    T value = read(name, fallback);
    check_range(key, value);
    return value;
  }
  template <typename E>
  E get(const EnumKey<E>& key) {
    const std::string name = relative_name(key);
    const std::string spelling = read(name, key.spelling(key.fallback()));
    for (const auto& [s, v] : key.choices())
      if (s == spelling) return v;
    reject_choice(key, spelling);
  }
  bool has(const KeyBase& key) const { return has(relative_name(key)); }
  bool has(std::string_view name) const;  // a key or table, by its name relative to this table

  // The table at `name` (created empty when absent); keys read from it keep their full names.
  Config section(std::string_view name);
  // An array of tables ([[model.layers]]); each element is a Config whose keys are reported
  // as `model.layers[2].out`.
  std::vector<Config> table_array(std::string_view name);

  // Throws ConfigError listing keys never read: unknown ones with the nearest declared key, and
  // declared ones that this config does not use (optim.momentum with optim.name = "adamw").
  void finish() const;
  std::string to_toml() const;                          // the resolved config (floats shortest round-trip)
  const std::string& source() const;                    // the file name, for messages
  std::string path_of(std::string_view key) const;      // full dotted key for messages
  std::string set_note(const std::string& path) const;  // " (from --set)" for a key --set gave, else ""

 private:
  struct State;
  Config(std::shared_ptr<State> state, void* table, std::string prefix);
  void* node(std::string_view key) const;
  void* insert_default(std::string_view key, void* value_node);
  template <typename T>
  T with_default(std::string_view key, const T& fallback);
  std::string relative_name(const KeyBase& key) const;
  void require_present(std::string_view name) const;
  void check_range(const KeyBase& key, double value) const;
  void check_range(const KeyBase& key, std::int64_t value) const;  // the message shows the integer
  void check_range(const KeyBase& key, const std::vector<double>& values) const {
    for (double v : values) check_range(key, v);
  }
  void check_range(const KeyBase& key, const std::vector<std::int64_t>& values) const {
    for (auto v : values) check_range(key, static_cast<double>(v));
  }
  void check_range(const KeyBase&, bool) const {}
  void check_range(const KeyBase&, const std::string&) const {}
  void check_range(const KeyBase&, const std::vector<std::string>&) const {}
  [[noreturn]] void reject_choice(const KeyBase& key, const std::string& spelling) const;
  [[noreturn]] void reject_range(const KeyBase& key, const std::string& value) const;

  std::int64_t read(std::string_view name, std::int64_t fallback);
  double read(std::string_view name, double fallback);  // integers are accepted
  bool read(std::string_view name, bool fallback);
  std::string read(std::string_view name, const std::string& fallback);
  std::vector<std::int64_t> read(std::string_view name, const std::vector<std::int64_t>& fallback);
  // One value or an array of them: a single value reads as a one-element list.
  std::vector<double> read(std::string_view name, const std::vector<double>& fallback);
  std::vector<std::string> read(std::string_view name, const std::vector<std::string>& fallback);

  std::shared_ptr<State> state_;
  void* table_ = nullptr;  // toml::table*
  std::string prefix_;     // "" or "model.layers[2]."
};

// A key whose value differs between two resolved configs (config_changes).
struct ConfigChange {
  std::string key;     // "model.n_head", "model.layers[1].out", "model.layers" (a count)
  std::string before;  // TOML values ("4", "'relu'"), or "N tables" for an array of tables
  std::string after;
};

// The keys under table `table` ("model") whose values differ between the resolved configs
// `before` and `after` (TOML texts; ConfigError naming `before_source` or `after_source` when
// one does not parse), in key order. Left out: keys whose last part is in `ignored`, and keys
// only one of them holds (written by another version of ringtrain). Arrays of tables are
// compared element by element; a different count is one change, of the array.
std::vector<ConfigChange> config_changes(std::string_view before, const std::string& before_source,
                                         std::string_view after, const std::string& after_source,
                                         std::string_view table, const std::vector<std::string>& ignored);

}  // namespace ringtrain
