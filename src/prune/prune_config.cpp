// read_prune_config and the pruning schedule. Keys other than `method` are read only when
// pruning is on, so e.g. prune.sparsity with method = "none" is reported as an unknown key.
#include <cmath>

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/prune/pruner.hpp"

namespace ringtrain {

PruneConfig read_prune_config(Config& c) {
  PruneConfig p;
  const std::string method = c.get_string("method", "none");
  if (method == "none") return p;
  RT_REQUIRE(method == "magnitude", ConfigError, "config: {}: {}: unknown method '{}' (known: none, magnitude)",
             c.source(), c.path_of("method"), method);
  p.enabled = true;
  const std::string scope = c.get_string("scope", "layer");
  RT_REQUIRE(scope == "layer" || scope == "global", ConfigError,
             "config: {}: {}: unknown scope '{}' (known: layer, global)", c.source(), c.path_of("scope"), scope);
  p.scope = scope == "layer" ? PruneScope::layer : PruneScope::global;
  p.sparsity = c.get_double("sparsity", 0.5);
  RT_REQUIRE(p.sparsity >= 0.0 && p.sparsity < 1.0, ConfigError, "config: {}: {}: must be in [0, 1), got {}",
             c.source(), c.path_of("sparsity"), p.sparsity);
  p.start_step = c.get_int("start_step", 0);
  RT_REQUIRE(p.start_step >= 0, ConfigError, "config: {}: {}: must be >= 0, got {}", c.source(),
             c.path_of("start_step"), p.start_step);
  p.end_step = c.require_int("end_step");
  RT_REQUIRE(p.end_step >= 1 && p.end_step >= p.start_step, ConfigError,
             "config: {}: {}: must be >= 1 and >= prune.start_step ({}), got {}", c.source(), c.path_of("end_step"),
             p.start_step, p.end_step);
  p.every_steps = c.get_int("every_steps", 100);
  RT_REQUIRE(p.every_steps >= 1, ConfigError, "config: {}: {}: must be >= 1, got {}", c.source(),
             c.path_of("every_steps"), p.every_steps);
  p.layers = c.get_int_list("layers", {});
  for (std::int64_t l : p.layers)
    RT_REQUIRE(l >= 0, ConfigError, "config: {}: {}: layer indices must be >= 0, got {}", c.source(),
               c.path_of("layers"), l);
  p.structured = c.get_bool("structured", false);
  RT_REQUIRE(!p.structured || p.scope == PruneScope::layer, ConfigError,
             "config: {}: {}: structured pruning needs scope = \"layer\" (neuron norms of different layers are not "
             "comparable)",
             c.source(), c.path_of("scope"));
  return p;
}

double scheduled_sparsity(const PruneConfig& c, std::int64_t step) {
  if (step < c.start_step) return 0.0;
  if (step >= c.end_step) return c.sparsity;
  const double progress = static_cast<double>(step - c.start_step) / static_cast<double>(c.end_step - c.start_step);
  return c.sparsity * (1.0 - std::pow(1.0 - progress, 3.0));
}

bool is_mask_update_step(const PruneConfig& c, std::int64_t step) {
  if (step < c.start_step || step > c.end_step) return false;
  return step == c.end_step || (step - c.start_step) % c.every_steps == 0;
}

}  // namespace ringtrain
