// Magnitude pruning ([prune]): a 0/1 mask over the weights of linear/conv2d layers, recomputed
// from |w| (or, structured, from each output neuron's L2 norm) on a cubic schedule and applied
// after every optimizer step to the parameters and the optimizer state, so pruned weights stay
// exactly 0. Masks depend only on the replicated parameters, so all ranks compute the same one.
// On the GPU the (rare) mask updates run on a host copy of the parameters; the mask is applied
// where the data lives, with a device copy of it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/tensor/arena_range.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

class Communicator;
class Config;
class Model;
class Optimizer;

enum class PruneScope { layer, global };

struct PruneConfig {
  bool enabled = false;                  // method = "magnitude"
  PruneScope scope = PruneScope::layer;  // one threshold per weight tensor, or one over all of them
  double sparsity = 0.0;                 // final fraction pruned (of weights; of neurons when structured)
  std::int64_t start_step = 0;           // first mask update (after this many optimizer steps)
  std::int64_t end_step = 0;             // last one, at the final sparsity (== start_step: one-shot)
  std::int64_t every_steps = 100;        // mask updates in between
  std::vector<std::int64_t> layers;      // model.layers indices; empty: every linear and conv2d layer
  bool structured = false;               // whole output neurons of linear layers, by L2 norm
};

// Reads [prune]: method ("none" | "magnitude"), scope ("layer" | "global"), sparsity,
// start_step, end_step, every_steps, layers, structured. ConfigError names the key and value.
PruneConfig read_prune_config(Config& prune_config);

// Target sparsity after `step` optimizer steps: 0 before start_step, then
// s_f * (1 - (1 - (step - start) / (end - start))^3) (Zhu & Gupta), s_f from end_step on.
double scheduled_sparsity(const PruneConfig& c, std::int64_t step);
// Whether the mask is recomputed after `step`: start_step, every every_steps after it, end_step.
bool is_mask_update_step(const PruneConfig& c, std::int64_t step);

// Sets mask to 0 on exactly round(sparsity * n) of the n elements of `ranges` (taken together)
// with the smallest |params|, to 1 on the others. Ties go to elements already masked, then to
// the lower arena offset, so the result is the same on every rank and every run.
void mask_smallest_magnitudes(const float* params, float* mask, const std::vector<ArenaRange>& ranges, double sparsity);

// A linear layer's weight [rows, cols] and bias (bias_offset -1: none) in the arena.
struct NeuronRange {
  std::int64_t weight_offset = 0;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t bias_offset = -1;
};

// Structured: masks whole rows (with their bias entry) of the round(sparsity * rows) output
// neurons of smallest weight-row L2 norm; ties as above (masked first, then lower row).
void mask_smallest_neurons(const float* params, float* mask, const NeuronRange& layer, double sparsity);

// One pruned layer at the end of a run.
struct LayerSparsity {
  std::size_t layer = 0;     // model.layers index
  std::string kind;          // "linear", "conv2d"
  std::int64_t weights = 0;  // elements of the weight tensor
  std::int64_t zeros = 0;    // of them exactly 0
  std::int64_t neurons = 0;  // structured only: output neurons, and those pruned
  std::int64_t neurons_pruned = 0;
};

class Pruner {
 public:
  // Checks `layers` against the model (ConfigError naming prune.layers). `comm` compares the
  // masks of all ranks after each update; total_steps is only for the "won't be reached" warning.
  Pruner(const PruneConfig& config, Model& model, Optimizer& optimizer, Communicator& comm, std::int64_t total_steps);

  // After optimizer step `step` (steps completed): at scheduled steps recomputes the mask
  // (collective: checks it is identical on all ranks, CollectiveError if not) and logs it;
  // always zeroes the masked parameters and their optimizer state (on the GPU with the mask
  // kernel on the compute stream, after the optimizer's update; +0 exactly, as on the host).
  void after_step(std::int64_t step);

  const PruneConfig& config() const { return config_; }
  // 0/1 per arena element (1 outside the pruned weights), on the host whatever the model's
  // device: checkpointed as "prune/mask".
  Tensor& mask() { return mask_; }
  // Call after writing mask() from outside (a checkpoint resume): the mask applied from then on
  // is the one written (on the GPU: uploads it to the device copy).
  void mask_written();
  // The arena ranges the mask is applied to: each pruned weight tensor, and when structured
  // its layer's bias (the mask is 1 everywhere else); sorted by offset.
  const std::vector<ArenaRange>& masked_ranges() const { return ranges_; }
  // Per pruned layer, counting the parameters as they are now.
  std::vector<LayerSparsity> report() const;

 private:
  struct Target {
    std::size_t layer;
    std::string_view kind;
    ArenaRange weight;
    NeuronRange neurons;  // linear layers (structured)
  };
  void update_mask(std::int64_t step);
  void apply_mask();
  double masked_fraction() const;  // of the selected weights

  PruneConfig config_;
  Model& model_;
  Optimizer& optimizer_;
  Communicator& comm_;
  std::vector<Target> targets_;
  std::vector<ArenaRange> ranges_;
  Tensor mask_;
  Tensor device_mask_;  // the mask on the GPU for a model there; undefined on the CPU
};

// Structured pruning made real: copies the kept neurons' parameters (rows of each linear
// weight and bias, and the matching input columns of the next linear layer) of `dense`, pruned
// with `mask`, into `shrunk`: the same MLP with only the kept neurons in each hidden layer.
// Throws Error when `shrunk` does not have exactly those shapes.
void copy_kept_neurons(Model& dense, const float* mask, Model& shrunk);

// Output neurons kept (mask 1 on their weight row) in each linear layer of `model`, in order.
std::vector<std::int64_t> kept_neurons_per_linear(Model& model, const float* mask);

}  // namespace ringtrain
