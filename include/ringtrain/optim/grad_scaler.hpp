// GradScaler: dynamic loss scaling for fp16 training. The loss (its gradient) is multiplied
// by scale() before backward so small gradients survive fp16; a step whose gradients overflow
// is skipped and the scale backs off, and after growth_interval clean steps it grows again.
#pragma once
#include <cstdint>

namespace ringtrain {

// [loss_scale] of the run config (used with train.precision = "fp16").
struct LossScaleOptions {
  double init = 65536.0;
  std::int64_t growth_interval = 2000;  // clean steps before the scale grows
  double growth_factor = 2.0;           // > 1
  double backoff_factor = 0.5;          // in (0, 1)
  bool dynamic = true;                  // false: the scale stays `init`; overflowing steps are still skipped
};

class GradScaler {
 public:
  // Below this the gradients are non-finite at any scale (a diverged model, not an fp16
  // overflow): update() throws instead of skipping steps forever.
  static constexpr double kMinScale = 1.0 / 16777216.0;  // 2^-24, the smallest f16 subnormal

  struct State {
    double scale = 1.0;
    std::int64_t good_steps = 0;     // clean steps since the last growth or backoff
    std::int64_t skipped_steps = 0;  // steps skipped for overflow, over the whole run
  };

  // Disabled (bf16, fp32): scale() is 1 and update() applies every step.
  GradScaler() = default;
  explicit GradScaler(const LossScaleOptions& options);

  bool enabled() const { return enabled_; }
  double scale() const { return state_.scale; }
  std::int64_t skipped_steps() const { return state_.skipped_steps; }

  // After the gradients of a step are reduced: whether to apply the step. On overflow the
  // step is counted as skipped and (dynamic) the scale backs off; NumericError when it would
  // fall below kMinScale. Every rank calls it with the same flag, so all agree.
  bool update(bool found_nonfinite);

  const State& state() const { return state_; }
  void restore(const State& s) { state_ = s; }

 private:
  bool enabled_ = false;
  LossScaleOptions options_;
  State state_;
};

}  // namespace ringtrain
