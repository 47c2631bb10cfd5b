// read_data_config: defaults, types and ranges of the [data] keys. A file list may be one
// string or an array; `test = ""` means no test set.
#include "ringtrain/data/data_config.hpp"

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {

std::vector<std::string> file_list(Config& data, std::string_view key, bool required) {
  RT_REQUIRE(!required || data.has(key), ConfigError, "config: {}: missing required key '{}'", data.source(),
             data.path_of(key));
  std::vector<std::string> files = data.get_string_list(key, {});
  std::erase(files, "");
  RT_REQUIRE(!required || !files.empty(), ConfigError, "config: {}: key '{}': no file given", data.source(),
             data.path_of(key));
  return files;
}

void require_at_least(const Config& c, std::string_view key, std::int64_t v, std::int64_t min) {
  RT_REQUIRE(v >= min, ConfigError, "config: {}: key '{}': must be >= {}, got {}", c.source(), c.path_of(key), min, v);
}

}  // namespace

DatasetSpec DataConfig::spec(const std::vector<std::string>& sources) const {
  DatasetSpec s;
  s.sources = sources;
  s.images_key = images_key;
  s.labels_key = labels_key;
  s.strategy = strategy;
  s.nonfinite = nonfinite;
  return s;
}

DataConfig read_data_config(Config& data) {
  DataConfig d;
  d.train = file_list(data, "train", true);
  d.test = file_list(data, "test", false);
  d.images_key = data.get_string("images_key", d.images_key);
  d.labels_key = data.get_string("labels_key", d.labels_key);

  const std::string strategy = data.get_string("strategy", std::string(read_strategy_name(d.strategy)));
  const auto parsed = read_strategy_from_name(strategy);
  RT_REQUIRE(parsed.has_value(), ConfigError, "config: {}: key '{}': '{}' is not a strategy (memory, stream)",
             data.source(), data.path_of("strategy"), strategy);
  d.strategy = *parsed;
  const std::string nonfinite = data.get_string("nonfinite", "error");
  RT_REQUIRE(nonfinite == "error" || nonfinite == "skip", ConfigError,
             "config: {}: key '{}': '{}' is not one of error, skip", data.source(), data.path_of("nonfinite"),
             nonfinite);
  d.nonfinite = nonfinite == "skip" ? NonFinite::skip : NonFinite::error;

  const std::int64_t prefetch = data.get_int("prefetch", d.prefetch);
  require_at_least(data, "prefetch", prefetch, 0);
  RT_REQUIRE(prefetch <= 1024, ConfigError, "config: {}: key '{}': must be <= 1024, got {}", data.source(),
             data.path_of("prefetch"), prefetch);
  d.prefetch = static_cast<int>(prefetch);
  d.shuffle_window = data.get_int("shuffle_window", d.shuffle_window);
  require_at_least(data, "shuffle_window", d.shuffle_window, 1);
  d.read_ahead = data.get_int("read_ahead", d.read_ahead);
  require_at_least(data, "read_ahead", d.read_ahead, 1);

  d.normalize.mean = data.get_double_list("mean", d.normalize.mean);
  // The number of values is checked against the samples' channels by the loader.
  d.normalize.std = data.get_double_list("std", d.normalize.std);
  for (const double s : d.normalize.std)
    RT_REQUIRE(s > 0.0, ConfigError, "config: {}: key '{}': must be > 0, got {}", data.source(), data.path_of("std"),
               s);

  const std::string augment_on = data.get_string("augment_on", "auto");
  RT_REQUIRE(augment_on == "auto" || augment_on == "cpu" || augment_on == "gpu", ConfigError,
             "config: {}: key '{}': '{}' is not one of \"auto\", \"cpu\", \"gpu\"", data.source(),
             data.path_of("augment_on"), augment_on);
  d.augment_on = augment_on == "gpu" ? AugmentOn::gpu : augment_on == "cpu" ? AugmentOn::cpu : AugmentOn::automatic;

  Config augment = data.section("augment");
  d.augment.crop_padding = augment.get_int("crop_padding", d.augment.crop_padding);
  require_at_least(augment, "crop_padding", d.augment.crop_padding, 0);
  d.augment.flip = augment.get_bool("flip", d.augment.flip);
  return d;
}

}  // namespace ringtrain
