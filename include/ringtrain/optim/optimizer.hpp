// Optimizers over the flat parameter/gradient arenas (SGD with momentum/nesterov/weight
// decay, AdamW) and learning-rate schedules (constant, step, cosine with linear warmup).
// An optimizer made for Device::cuda keeps its state on the GPU and updates device arenas
// with one fused kernel launch per step. Under ZeRO an optimizer owns only this rank's shard of
// the arena: it updates those elements alone and keeps their state packed.
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
  // For an arena of num_params elements, of which this optimizer updates `owned` (sorted,
  // disjoint ranges; empty: all of it).
  Optimizer(std::int64_t num_params, std::vector<ArenaRange> owned);
  virtual ~Optimizer() = default;
  virtual std::string_view name() const = 0;
  // One update of the owned parameters of the n-element arenas with learning rate lr, using
  // grads * grad_scale (the 1/world averaging folded into the update: one pass over the arenas
  // instead of two). params and grads live on the optimizer's device; n must be num_params.
  // copy (GPU optimizers): the arena in the compute dtype that the updated parameters also go
  // to (the model's compute copy, Model::compute_copy); none by default.
  void step(float* params, const float* grads, std::int64_t n, float lr, float grad_scale = 1.0f,
            const ComputeCopyOut& copy = {});
  // step on the GPU with the gradients also scaled by the f32 at device_scale (device memory),
  // read when the update runs: 0 there leaves the parameters and the state as they were (a step
  // decided on the device, ringtrain/train/step_decision.hpp). steps_taken() counts the step
  // either way; a caller that learns it was skipped gives it back (restore_steps_taken).
  void step_scaled_on_device(float* params, const float* grads, std::int64_t n, float lr, const float* device_scale,
                             const ComputeCopyOut& copy = {});
  // The same with the gradients of the owned elements only, packed in order (ZeRO stage 2's
  // shard of the reduced gradients, state_elements() of them).
  void step_packed(float* params, const float* owned_grads, std::int64_t n, float lr, float grad_scale = 1.0f);
  // The arena elements this optimizer updates, and how many (the length of each state buffer).
  const std::vector<ArenaRange>& owned() const { return owned_; }
  std::int64_t state_elements() const { return total_count(owned_); }
  // Parameters updated without weight decay (AdamW parameter groups: biases, norms, position
  // embeddings), as sorted, disjoint arena ranges.
  void exempt_from_weight_decay(std::vector<ArenaRange> ranges);
  // Optimizer state for checkpoints: each buffer (momentum, moments) with its name, holding the
  // owned elements packed in arena order; and the number of steps taken (AdamW's bias
  // correction depends on it).
  struct StateBuffer {
    std::string name;
    Tensor tensor;
  };
  virtual std::vector<StateBuffer> state() = 0;
  std::int64_t steps_taken() const { return steps_taken_; }
  void restore_steps_taken(std::int64_t steps) { steps_taken_ = steps; }

 protected:
  // Updates `count` elements at params and grads, whose state starts at element state_offset
  // of the packed state buffers; steps_taken() already counts this step.
  // device_scale: null, or step_scaled_on_device's; copy: the compute copy at these parameters'
  // offset, or none (both GPU optimizers only).
  virtual void update(float* params, const float* grads, std::int64_t state_offset, std::int64_t count, float lr,
                      float grad_scale, const float* device_scale, const ComputeCopyOut& copy, bool weight_decay) = 0;

 private:
  // A run of owned elements updated alike: where it is in the arena and in the packed state.
  struct Segment {
    std::int64_t offset, state_offset, count;
    bool weight_decay;
  };
  // The owned elements cut at the weight-decay groups' edges.
  void plan_segments();
  // step and step_packed: the gradients of a segment at grads + its offset or its state offset.
  void step_segments(float* params, const float* grads, bool packed, std::int64_t n, float lr, float grad_scale,
                     const float* device_scale, const ComputeCopyOut& copy);

  std::int64_t num_params_;
  std::vector<ArenaRange> owned_;
  std::vector<ArenaRange> no_decay_;
  std::vector<Segment> segments_;
  std::int64_t steps_taken_ = 0;
};

class Sgd : public Optimizer {
 public:
  Sgd(std::int64_t num_params, const SgdHyper& hyper, Device device = Device::cpu, std::vector<ArenaRange> owned = {});
  std::string_view name() const override { return "sgd"; }
  std::vector<StateBuffer> state() override { return {{"velocity", velocity_}}; }

 private:
  void update(float* params, const float* grads, std::int64_t state_offset, std::int64_t count, float lr,
              float grad_scale, const float* device_scale, const ComputeCopyOut& copy, bool weight_decay) override;
  SgdHyper hyper_;
  Tensor velocity_;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::int64_t num_params, const AdamWHyper& hyper, Device device = Device::cpu,
        std::vector<ArenaRange> owned = {});
  std::string_view name() const override { return "adamw"; }
  std::vector<StateBuffer> state() override { return {{"m", m_}, {"v", v_}}; }

 private:
  void update(float* params, const float* grads, std::int64_t state_offset, std::int64_t count, float lr,
              float grad_scale, const float* device_scale, const ComputeCopyOut& copy, bool weight_decay) override;
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
// owned: the arena ranges the optimizer updates (ZeRO: this rank's shard; empty: all).
OptimSetup build_optimizer(Config& optim_config, std::int64_t num_params, std::int64_t total_steps,
                           Device device = Device::cpu, bool language_model = false,
                           std::vector<ArenaRange> owned = {});

}  // namespace ringtrain
