// Learning-rate schedules; warmup ramps linearly from base_lr/warmup to base_lr.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "ringtrain/core/error.hpp"
#include "ringtrain/optim/optimizer.hpp"

namespace ringtrain {

LrSchedule::LrSchedule(const Options& o) : o_(o) {
  RT_REQUIRE(o.base_lr > 0.0, ConfigError, "optim.lr: must be > 0, got {}", o.base_lr);
  RT_REQUIRE(o.warmup_steps >= 0, ConfigError, "optim.warmup_steps: must be >= 0, got {}", o.warmup_steps);
  RT_REQUIRE(o.step_size > 0, ConfigError, "optim.step_size: must be > 0, got {}", o.step_size);
  RT_REQUIRE(o.gamma > 0.0, ConfigError, "optim.gamma: must be > 0, got {}", o.gamma);
  RT_REQUIRE(o.min_lr >= 0.0 && o.min_lr <= o.base_lr, ConfigError, "optim.min_lr: must be in [0, lr], got {}",
             o.min_lr);
}

double LrSchedule::at(std::int64_t step) const {
  if (step < o_.warmup_steps) return o_.base_lr * static_cast<double>(step + 1) / static_cast<double>(o_.warmup_steps);
  const std::int64_t t = step - o_.warmup_steps;
  switch (o_.kind) {
    case Kind::constant: return o_.base_lr;
    case Kind::step: {
      const std::int64_t decays = t / o_.step_size;  // whole steps only: a staircase
      return o_.base_lr * std::pow(o_.gamma, static_cast<double>(decays));
    }
    case Kind::cosine: {  // from base_lr at the first step after warmup to min_lr at the last (total_steps - 1)
      const std::int64_t horizon = std::max<std::int64_t>(1, o_.total_steps - o_.warmup_steps - 1);
      const double progress = std::min(1.0, static_cast<double>(t) / static_cast<double>(horizon));
      return o_.min_lr + 0.5 * (o_.base_lr - o_.min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
    }
  }
  return o_.base_lr;
}

}  // namespace ringtrain
