// GradScaler (see header). The factors are applied in double, so a run and its resumption
// from a checkpoint (which stores the scale as a double) follow the same sequence of scales.
#include "ringtrain/optim/grad_scaler.hpp"

#include <cmath>

#include "ringtrain/core/error.hpp"

namespace ringtrain {

GradScaler::GradScaler(const LossScaleOptions& options) : enabled_(true), options_(options) {
  RT_REQUIRE(options.init >= kMinScale && std::isfinite(options.init), ConfigError,
             "loss_scale.init: must be finite and >= 2^-24, got {}", options.init);
  RT_REQUIRE(options.growth_interval >= 1, ConfigError, "loss_scale.growth_interval: must be >= 1, got {}",
             options.growth_interval);
  RT_REQUIRE(options.growth_factor > 1.0, ConfigError, "loss_scale.growth_factor: must be > 1, got {}",
             options.growth_factor);
  RT_REQUIRE(options.backoff_factor > 0.0 && options.backoff_factor < 1.0, ConfigError,
             "loss_scale.backoff_factor: must be in (0, 1), got {}", options.backoff_factor);
  state_.scale = options.init;
}

bool GradScaler::update(bool found_nonfinite) {
  if (!enabled_) return true;
  if (found_nonfinite) {
    ++state_.skipped_steps;
    state_.good_steps = 0;
    if (!options_.dynamic) return false;
    const double next = state_.scale * options_.backoff_factor;
    if (next < kMinScale)
      throw NumericError(
          fmt::format("fp16 gradients are Inf/NaN even at loss scale {:g} ({} steps skipped): the "
                      "model diverged, not an fp16 overflow; lower optim.lr or use train.precision = "
                      "\"bf16\"",
                      state_.scale, state_.skipped_steps));
    state_.scale = next;
    return false;
  }
  if (options_.dynamic && ++state_.good_steps >= options_.growth_interval) {
    state_.good_steps = 0;
    const double next = state_.scale * options_.growth_factor;
    if (std::isfinite(static_cast<float>(next))) state_.scale = next;  // dlogits are scaled in f32
  }
  return true;
}

}  // namespace ringtrain
