// Config: the TOML run configuration with `--set key=value` overrides. Typed getters record
// every key they read (and insert defaults, so the resolved config is complete); finish()
// rejects any key nobody read, so a typo is an error, never silently ignored.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace ringtrain {

class Config {
 public:
  // Throws ConfigError naming the file (and line:column for syntax errors) or the override.
  static Config load_file(const std::string& path, const std::vector<std::string>& overrides = {});
  static Config parse(std::string_view text, const std::string& source, const std::vector<std::string>& overrides = {});

  // Typed access with a default (inserted into the config when absent).
  std::int64_t get_int(std::string_view key, std::int64_t fallback);
  double get_double(std::string_view key, double fallback);  // integers are accepted
  bool get_bool(std::string_view key, bool fallback);
  std::string get_string(std::string_view key, const std::string& fallback);
  std::vector<std::int64_t> get_int_list(std::string_view key, const std::vector<std::int64_t>& fallback);
  // One value or an array of them: a single value reads as a one-element list.
  std::vector<double> get_double_list(std::string_view key, const std::vector<double>& fallback);
  std::vector<std::string> get_string_list(std::string_view key, const std::vector<std::string>& fallback);
  // Required keys: ConfigError "missing required key" when absent.
  std::int64_t require_int(std::string_view key);
  std::string require_string(std::string_view key);
  bool has(std::string_view key) const;

  // The table at `key` (created empty when absent); its keys are reported as `key.x`.
  Config section(std::string_view key);
  // An array of tables ([[model.layers]]); each element is a Config whose keys are reported
  // as `model.layers[2].out`.
  std::vector<Config> table_array(std::string_view key);

  // Throws ConfigError listing keys never read (unknown keys).
  void finish() const;
  std::string to_toml() const;                      // the resolved config
  const std::string& source() const;                // the file name, for messages
  std::string path_of(std::string_view key) const;  // full dotted key for messages

 private:
  struct State;
  Config(std::shared_ptr<State> state, void* table, std::string prefix);
  void* node(std::string_view key) const;
  void* insert_default(std::string_view key, void* value_node);
  template <typename T>
  T with_default(std::string_view key, const T& fallback);

  std::shared_ptr<State> state_;
  void* table_ = nullptr;  // toml::table*
  std::string prefix_;     // "" or "model.layers[2]."
};

}  // namespace ringtrain
