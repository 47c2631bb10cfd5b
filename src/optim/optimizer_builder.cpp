// build_optimizer: [optim] -> optimizer + schedule; the keys are declared once below. Each
// optimizer and schedule reads only its own keys, so e.g. `beta1` with name = "sgd" is refused
// as a key that optimizer does not use.
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/optim/optimizer.hpp"

namespace ringtrain {
namespace {

const EnumKey<std::string> kName({.name = "optim.name", .doc = "the optimizer"}, "sgd",
                                 {{"sgd", "sgd"}, {"adamw", "adamw"}});
const NumberKey kLr({.name = "optim.lr",
                     .doc = "peak learning rate",
                     .range = Range::above(0),
                     .default_doc = "`0.01` (sgd), `0.001` (adamw)"},
                    0.01);
const NumberKey kWeightDecay({.name = "optim.weight_decay",
                              .doc = "sgd: L2 added to the gradient; adamw: decoupled decay",
                              .range = Range::at_least(0),
                              .default_doc = "`0` (sgd), `0.01` (adamw)"},
                             0.0);
const NumberKey kMomentum({.name = "optim.momentum",
                           .doc = "heavy-ball momentum",
                           .range = Range::fraction(),
                           .read_when = {"optim.name", {"sgd"}}},
                          0.0);
const BoolKey kNesterov({.name = "optim.nesterov",
                         .doc = "Nesterov momentum (needs momentum > 0)",
                         .read_when = {"optim.name", {"sgd"}}},
                        false);
const NumberKey kBeta1({.name = "optim.beta1",
                        .doc = "first-moment decay",
                        .range = Range::fraction(),
                        .read_when = {"optim.name", {"adamw"}}},
                       0.9);
const NumberKey kBeta2({.name = "optim.beta2",
                        .doc = "second-moment decay",
                        .range = Range::fraction(),
                        .read_when = {"optim.name", {"adamw"}}},
                       0.999);
const NumberKey kEps(
    {.name = "optim.eps", .doc = "denominator term", .range = Range::above(0), .read_when = {"optim.name", {"adamw"}}},
    1e-8);
const EnumKey<LrSchedule::Kind> kSchedule(
    {.name = "optim.schedule", .doc = "learning-rate schedule after the warm-up"}, LrSchedule::Kind::constant,
    {{"constant", LrSchedule::Kind::constant}, {"step", LrSchedule::Kind::step}, {"cosine", LrSchedule::Kind::cosine}});
const IntKey kWarmupSteps({.name = "optim.warmup_steps",
                           .doc = "linear ramp from 0 to `lr` over these optimizer steps",
                           .range = Range::at_least(0)},
                          0);
const IntKey kStepSize({.name = "optim.step_size",
                        .doc = "multiply the rate by `gamma` every this many steps",
                        .range = Range::at_least(1),
                        .read_when = {"optim.schedule", {"step"}}},
                       1000);
const NumberKey kGamma({.name = "optim.gamma",
                        .doc = "the step schedule's factor",
                        .range = Range::above(0),
                        .read_when = {"optim.schedule", {"step"}}},
                       0.1);
const NumberKey kMinLr({.name = "optim.min_lr",
                        .doc = "the cosine schedule's floor, reached at the run's last step (at most `lr`)",
                        .range = Range::at_least(0),
                        .read_when = {"optim.schedule", {"cosine"}}},
                       0.0);

const StringListKey kNoDecay({.name = "optim.no_decay",
                              .doc = "parameters updated without weight decay: any of `bias` (every bias), `norm` "
                                     "(LayerNorm and BatchNorm scales and shifts), `position` (position embeddings), "
                                     "`embedding` (token embeddings)",
                              .default_doc = "`[\"bias\", \"norm\", \"position\"]` for a language model (token "
                                             "input), `[]` otherwise"},
                             {});
const NumberKey kClipGradNorm({.name = "optim.clip_grad_norm",
                               .doc = "scale the averaged gradients down to this global L2 norm when above it (the "
                                      "same on every rank); 0: no clipping",
                               .range = Range::at_least(0)},
                              0.0);

std::vector<std::string> read_no_decay(Config& c, bool language_model) {
  std::vector<std::string> kinds =
      language_model ? c.get(kNoDecay, std::vector<std::string>{"bias", "norm", "position"}) : c.get(kNoDecay);
  for (const auto& k : kinds)
    RT_REQUIRE(k == "bias" || k == "norm" || k == "position" || k == "embedding", ConfigError,
               "config: {}: key '{}': \"{}\" is not one of \"bias\", \"norm\", \"position\", \"embedding\"", c.source(),
               kNoDecay.name(), k);
  return kinds;
}

}  // namespace

OptimSetup build_optimizer(Config& c, std::int64_t num_params, std::int64_t total_steps, Device device,
                           bool language_model, std::vector<ArenaRange> owned) {
  const std::string name = c.get(kName);
  const bool adamw = name == "adamw";
  LrSchedule::Options so;
  so.base_lr = c.get(kLr, adamw ? 1e-3 : 0.01);
  std::unique_ptr<Optimizer> opt;
  if (adamw) {
    AdamWHyper h;
    h.beta1 = static_cast<float>(c.get(kBeta1));
    h.beta2 = static_cast<float>(c.get(kBeta2));
    h.eps = static_cast<float>(c.get(kEps));
    h.weight_decay = static_cast<float>(c.get(kWeightDecay, 0.01));
    opt = std::make_unique<AdamW>(num_params, h, device, std::move(owned));
  } else {
    SgdHyper h;
    h.momentum = static_cast<float>(c.get(kMomentum));
    h.nesterov = c.get(kNesterov);
    h.weight_decay = static_cast<float>(c.get(kWeightDecay));
    RT_REQUIRE(!h.nesterov || h.momentum > 0.0f, ConfigError, "config: {}: key '{}': nesterov needs momentum > 0",
               c.source(), kNesterov.name());
    opt = std::make_unique<Sgd>(num_params, h, device, std::move(owned));
  }
  so.kind = c.get(kSchedule);
  so.warmup_steps = c.get(kWarmupSteps);
  if (so.kind == LrSchedule::Kind::step) {
    so.step_size = c.get(kStepSize);
    so.gamma = c.get(kGamma);
  }
  if (so.kind == LrSchedule::Kind::cosine) {
    so.min_lr = c.get(kMinLr);
    RT_REQUIRE(so.min_lr <= so.base_lr, ConfigError, "config: {}: key '{}': must be at most optim.lr ({}), got {}",
               c.source(), kMinLr.name(), so.base_lr, so.min_lr);
  }
  so.total_steps = total_steps;
  return OptimSetup{std::move(opt), LrSchedule(so), read_no_decay(c, language_model), c.get(kClipGradNorm)};
}

}  // namespace ringtrain
