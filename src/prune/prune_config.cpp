// read_prune_config and the pruning schedule; the [prune] keys are declared once below. Keys
// other than `method` are read only when pruning is on, so e.g. prune.sparsity with
// method = "none" is refused as a key that method does not use.
#include <cmath>

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/prune/pruner.hpp"

namespace ringtrain {
namespace {

const KeyCondition kWhenMagnitude{"prune.method", {"magnitude"}};

const EnumKey<bool> kMethod({.name = "prune.method",
                             .doc = "`magnitude`: prune the smallest-magnitude weights of linear/conv2d layers "
                                    "(never biases); the other `prune.*` keys are read only then"},
                            false, {{"none", false}, {"magnitude", true}});
const EnumKey<PruneScope> kScope({.name = "prune.scope",
                                  .doc = "`layer`: one threshold per weight tensor; `global`: one over all pruned "
                                         "weights",
                                  .read_when = kWhenMagnitude},
                                 PruneScope::layer, {{"layer", PruneScope::layer}, {"global", PruneScope::global}});
const NumberKey kSparsity({.name = "prune.sparsity",
                           .doc = "final fraction of weights pruned (exactly round(s x n); of neurons when "
                                  "`structured`)",
                           .range = Range::fraction(),
                           .read_when = kWhenMagnitude},
                          0.5);
const IntKey kStartStep({.name = "prune.start_step",
                         .doc = "first optimizer step the mask is computed after",
                         .range = Range::at_least(0),
                         .read_when = kWhenMagnitude},
                        0);
const IntKey kEndStep({.name = "prune.end_step",
                       .doc = "last mask update; sparsity ramps as s x (1 - (1 - progress)^3) from `start_step`; "
                              "`end_step = start_step`: one-shot. Masked weights and their optimizer state are "
                              "zeroed after every step; the mask is checkpointed (`prune/mask`)",
                       .range = Range::at_least(1),
                       .required = true,
                       .read_when = kWhenMagnitude},
                      0);
const IntKey kEverySteps({.name = "prune.every_steps",
                          .doc = "steps between mask updates from `start_step`",
                          .range = Range::at_least(1),
                          .read_when = kWhenMagnitude},
                         100);
const IntListKey kLayers({.name = "prune.layers",
                          .doc = "`model.layers` indices to prune (empty: every linear and conv2d layer; structured: "
                                 "every linear layer but the output one)",
                          .range = Range::at_least(0),
                          .read_when = kWhenMagnitude},
                         {});
const BoolKey kStructured({.name = "prune.structured",
                           .doc = "prune whole output neurons of linear layers by the L2 norm of their weight row "
                                  "(with their bias); `ringtrain bench prune` times such an MLP really shrunk",
                           .read_when = kWhenMagnitude},
                          false);

}  // namespace

PruneConfig read_prune_config(Config& c) {
  PruneConfig p;
  p.enabled = c.get(kMethod);
  if (!p.enabled) return p;
  p.scope = c.get(kScope);
  p.sparsity = c.get(kSparsity);
  p.start_step = c.get(kStartStep);
  p.end_step = c.get(kEndStep);
  RT_REQUIRE(p.end_step >= p.start_step, ConfigError, "config: {}: key '{}': must be >= prune.start_step ({}), got {}",
             c.source(), kEndStep.name(), p.start_step, p.end_step);
  p.every_steps = c.get(kEverySteps);
  p.layers = c.get(kLayers);
  p.structured = c.get(kStructured);
  RT_REQUIRE(!p.structured || p.scope == PruneScope::layer, ConfigError,
             "config: {}: key '{}': structured pruning needs scope = \"layer\" (neuron norms of different layers are "
             "not comparable)",
             c.source(), kScope.name());
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
