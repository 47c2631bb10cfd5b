// Optimizers over the flat parameter/gradient arenas (SGD with momentum/nesterov/weight
// decay, AdamW) and learning-rate schedules (constant, step, cosine with linear warmup).
// An optimizer made for Device::cuda keeps its state on the GPU and updates device arenas
// with one fused kernel launch per step.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/optim/update_rules.hpp"
#include "ringtrain/tensor/arena_range.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

class Config;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string_view name() const = 0;
  // One update of all n parameters with learning rate lr, using grads * grad_scale (the
  // 1/world averaging folded into the update: one pass over the arenas instead of two).
  // params and grads live on the optimizer's device.
  void step(float* params, const float* grads, std::int64_t n, float lr, float grad_scale = 1.0f);
  // Parameters updated without weight decay (AdamW parameter groups: biases, norms, position
  // embeddings), as sorted, disjoint arena ranges.
  void exempt_from_weight_decay(std::vector<ArenaRange> ranges);
  // Optimizer state for checkpoints: each buffer (momentum, moments) with its name, and the
  // number of steps taken (AdamW's bias correction depends on it).
  struct StateBuffer {
    std::string name;
    Tensor tensor;
  };
  virtual std::vector<StateBuffer> state() = 0;
  std::int64_t steps_taken() const { return steps_taken_; }
  void restore_steps_taken(std::int64_t steps) { steps_taken_ = steps; }

 protected:
  // Updates elements [begin, begin + count) of the arenas (state indexed alike); steps_taken()
  // already counts this step.
  virtual void update(float* params, const float* grads, std::int64_t begin, std::int64_t count, float lr,
                      float grad_scale, bool weight_decay) = 0;

 private:
  std::int64_t steps_taken_ = 0;
  std::vector<ArenaRange> no_decay_;
};

class Sgd : public Optimizer {
 public:
  Sgd(std::int64_t num_params, const SgdHyper& hyper, Device device = Device::cpu);
  std::string_view name() const override { return "sgd"; }
  std::vector<StateBuffer> state() override { return {{"velocity", velocity_}}; }

 private:
  void update(float* params, const float* grads, std::int64_t begin, std::int64_t count, float lr, float grad_scale,
              bool weight_decay) override;
  SgdHyper hyper_;
  Tensor velocity_;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::int64_t num_params, const AdamWHyper& hyper, Device device = Device::cpu);
  std::string_view name() const override { return "adamw"; }
  std::vector<StateBuffer> state() override { return {{"m", m_}, {"v", v_}}; }

 private:
  void update(float* params, const float* grads, std::int64_t begin, std::int64_t count, float lr, float grad_scale,
              bool weight_decay) override;
  AdamWHyper hyper_;
  Tensor m_, v_;
};

class LrSchedule {
 public:
  enum class Kind { constant, step, cosine };
  struct Options {
    Kind kind = Kind::constant;
    double base_lr = 0.01;
    std::int64_t warmup_steps = 0;  // linear ramp from 0 (all kinds)
    std::int64_t step_size = 1;     // step: multiply by gamma every step_size steps
    double gamma = 0.1;
    double min_lr = 0.0;           // cosine floor
    std::int64_t total_steps = 1;  // cosine horizon
  };
  explicit LrSchedule(const Options& o);
  double at(std::int64_t step) const;  // learning rate for optimizer step `step` (0-based)

 private:
  Options o_;
};

// Reads [optim]: name ("sgd" | "adamw"), lr, momentum, nesterov, weight_decay, beta1, beta2,
// eps, schedule ("constant" | "step" | "cosine"), warmup_steps, step_size, gamma, min_lr,
// no_decay, clip_grad_norm.
struct OptimSetup {
  std::unique_ptr<Optimizer> optimizer;
  LrSchedule schedule;
  // optim.no_decay: which parameters get no weight decay ("bias", "norm", "position",
  // "embedding"); the caller maps them to arena ranges.
  std::vector<std::string> no_decay;
  double clip_grad_norm = 0.0;  // optim.clip_grad_norm; 0: no clipping
};
// language_model: the model reads tokens (optim.no_decay's default is then bias, norm, position).
OptimSetup build_optimizer(Config& optim_config, std::int64_t num_params, std::int64_t total_steps,
                           Device device = Device::cpu, bool language_model = false);

}  // namespace ringtrain
