// build_optimizer: [optim] -> optimizer + schedule. Each optimizer reads only its own keys,
// so e.g. `beta1` with name = "sgd" is reported as an unknown key.
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/optim/optimizer.hpp"

namespace ringtrain {
namespace {

LrSchedule::Kind parse_schedule(Config& c) {
  const std::string s = c.get_string("schedule", "constant");
  if (s == "constant") return LrSchedule::Kind::constant;
  if (s == "step") return LrSchedule::Kind::step;
  if (s == "cosine") return LrSchedule::Kind::cosine;
  throw ConfigError(fmt::format("config: {}: {}: unknown schedule '{}' (known: constant, step, cosine)", c.source(),
                                c.path_of("schedule"), s));
}

}  // namespace

OptimSetup build_optimizer(Config& c, std::int64_t num_params, std::int64_t total_steps, Device device) {
  const std::string name = c.get_string("name", "sgd");
  LrSchedule::Options so;
  so.base_lr = c.get_double("lr", name == "adamw" ? 1e-3 : 0.01);
  std::unique_ptr<Optimizer> opt;
  if (name == "sgd") {
    SgdHyper h;
    h.momentum = static_cast<float>(c.get_double("momentum", 0.0));
    h.nesterov = c.get_bool("nesterov", false);
    h.weight_decay = static_cast<float>(c.get_double("weight_decay", 0.0));
    RT_REQUIRE(h.momentum >= 0.0f && h.momentum < 1.0f, ConfigError, "config: {}: {}: must be in [0, 1), got {}",
               c.source(), c.path_of("momentum"), h.momentum);
    RT_REQUIRE(!h.nesterov || h.momentum > 0.0f, ConfigError, "config: {}: {}: nesterov needs momentum > 0", c.source(),
               c.path_of("nesterov"));
    opt = std::make_unique<Sgd>(num_params, h, device);
  } else if (name == "adamw") {
    AdamWHyper h;
    h.beta1 = static_cast<float>(c.get_double("beta1", 0.9));
    h.beta2 = static_cast<float>(c.get_double("beta2", 0.999));
    h.eps = static_cast<float>(c.get_double("eps", 1e-8));
    h.weight_decay = static_cast<float>(c.get_double("weight_decay", 0.01));
    RT_REQUIRE(h.beta1 >= 0.0f && h.beta1 < 1.0f && h.beta2 >= 0.0f && h.beta2 < 1.0f, ConfigError,
               "config: {}: optim.beta1/beta2 must be in [0, 1)", c.source());
    opt = std::make_unique<AdamW>(num_params, h, device);
  } else {
    throw ConfigError(
        fmt::format("config: {}: {}: unknown optimizer '{}' (known: sgd, adamw)", c.source(), c.path_of("name"), name));
  }
  so.kind = parse_schedule(c);
  so.warmup_steps = c.get_int("warmup_steps", 0);
  if (so.kind == LrSchedule::Kind::step) {
    so.step_size = c.get_int("step_size", 1000);
    so.gamma = c.get_double("gamma", 0.1);
  }
  if (so.kind == LrSchedule::Kind::cosine) so.min_lr = c.get_double("min_lr", 0.0);
  so.total_steps = total_steps;
  try {
    return OptimSetup{std::move(opt), LrSchedule(so)};
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("config: {}: {}", c.source(), e.what()));
  }
}

}  // namespace ringtrain
