// Pruner (see header): which weights are pruned, the mask updates on schedule with their
// cross-rank check, and the mask applied after every optimizer step where the data lives
// (tensor/device_ops.hpp: a host loop, or the device mask kernel).
#include <algorithm>
#include <set>
#include <utility>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/prune/pruner.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "tensor/device_ops.hpp"

namespace ringtrain {
Pruner::Pruner(const PruneConfig& config, Model& model, Optimizer& optimizer, Communicator& comm,
               std::int64_t total_steps)
    : config_(config),
      model_(model),
      optimizer_(optimizer),
      comm_(comm),
      mask_(Tensor::empty(Shape{model.arena_elements()})) {
  std::fill_n(mask_.f32(), mask_.numel(), 1.0f);
  const std::vector<Model::ParamTensor> tensors = model.param_tensors();
  const std::size_t output_layer = tensors.back().layer;
  auto prunable = [&](std::size_t layer) {
    return std::any_of(tensors.begin(), tensors.end(), [&](const Model::ParamTensor& t) {
      return t.layer == layer && t.name == "weight" &&
             (t.kind == "linear" || (t.kind == "conv2d" && !config.structured));
    });
  };
  std::set<std::size_t> chosen;
  if (config.layers.empty()) {
    for (const auto& t : tensors)
      if (prunable(t.layer) && !(config.structured && t.layer == output_layer)) chosen.insert(t.layer);
  } else {
    for (std::int64_t l : config.layers) {
      const auto layer = static_cast<std::size_t>(l);
      RT_REQUIRE(layer < model.num_layers(), ConfigError, "prune.layers: layer {} does not exist (the model has {})", l,
                 model.num_layers());
      RT_REQUIRE(prunable(layer), ConfigError, "prune.layers: layer {} has no weights to prune ({} linear layers{})", l,
                 config.structured ? "structured pruning takes only" : "only", config.structured ? "" : " and conv2d");
      RT_REQUIRE(!(config.structured && layer == output_layer), ConfigError,
                 "prune.layers: layer {} is the output layer: structured pruning would remove classes", l);
      chosen.insert(layer);
    }
  }
  RT_REQUIRE(!chosen.empty(), ConfigError, "prune: the model has no layer to prune");
  for (std::size_t layer : chosen) {
    Target t{layer, {}, {}, {}};
    for (const auto& p : tensors) {
      if (p.layer != layer) continue;
      t.kind = p.kind;
      if (p.name == "weight") {
        t.weight = {p.offset, p.shape.numel()};
        t.neurons.weight_offset = p.offset;
        t.neurons.rows = p.shape[0];
        t.neurons.cols = p.shape.numel() / p.shape[0];
      } else if (p.name == "bias") {
        t.neurons.bias_offset = p.offset;
      }
    }
    targets_.push_back(t);
    ranges_.push_back(t.weight);
    if (config.structured && t.neurons.bias_offset >= 0) ranges_.push_back({t.neurons.bias_offset, t.neurons.rows});
  }
  std::sort(ranges_.begin(), ranges_.end(),
            [](const ArenaRange& a, const ArenaRange& b) { return a.offset < b.offset; });
  if (model.device() == Device::cuda) {
    device_mask_ = Tensor::empty(mask_.shape(), DType::f32, Device::cuda);
    mask_written();
  }
  if (config.end_step > total_steps)
    log::info("prune: end_step {} is after the last step ({}): the run ends at sparsity {:.2f}", config.end_step,
              total_steps, scheduled_sparsity(config, total_steps));
}

void Pruner::after_step(std::int64_t step) {
  if (is_mask_update_step(config_, step)) update_mask(step);
  apply_mask();
}

void Pruner::update_mask(std::int64_t step) {
  const double target = scheduled_sparsity(config_, step);
  const FullParameters full(model_);
  const Tensor params = to_host(std::as_const(model_).params());
  const float* p = params.f32();
  float* m = mask_.f32();
  if (config_.structured) {
    for (const Target& t : targets_) mask_smallest_neurons(p, m, t.neurons, target);
  } else if (config_.scope == PruneScope::layer) {
    for (const Target& t : targets_) mask_smallest_magnitudes(p, m, {t.weight}, target);
  } else {
    std::vector<ArenaRange> all;
    all.reserve(targets_.size());
    for (const Target& t : targets_) all.push_back(t.weight);
    mask_smallest_magnitudes(p, m, all, target);
  }
  // Parameters are replicated, so masks must be too; a difference is a bug, never ignored.
  const std::uint64_t mine = fnv1a(m, static_cast<std::size_t>(mask_.numel()) * sizeof(float));
  std::uint64_t root = mine;
  comm_.broadcast(&root, sizeof(root), 0);
  std::int32_t differs = mine != root ? 1 : 0;
  comm_.allreduce_sum(&differs, 1, DType::i32);
  if (differs != 0)
    throw CollectiveError(
        fmt::format("prune: the masks of step {} differ across ranks: {} of {} ranks differ from "
                    "rank 0 ({:016x})",
                    step, differs, comm_.size(), root));
  mask_written();
  log::info("prune: step {}: sparsity {:.2f} (target {:.2f} at step {})", step, masked_fraction(), config_.sparsity,
            config_.end_step);
}

void Pruner::mask_written() {
  if (model_.device() == Device::cuda) copy_into(device_mask_, mask_);
}

void Pruner::apply_mask() {
  const Tensor& mask = model_.device() == Device::cuda ? device_mask_ : mask_;
  const DeviceOps& ops = device_ops(model_.device());
  float* params = model_.params().f32();          // non-const: the compute copy is refreshed
  if (model_.parameter_residency() != nullptr) {  // sharded parameters (ZeRO stage 3): this rank's shard
    for_each_owned(ranges_, optimizer_.owned(), [&](std::int64_t offset, std::int64_t, std::int64_t count) {
      ops.apply_mask(params + offset, mask.f32() + offset, count);
    });
  } else {
    for (const ArenaRange& r : ranges_) ops.apply_mask(params + r.offset, mask.f32() + r.offset, r.count);
  }
  // The optimizer state holds the elements it owns (all, or a ZeRO shard) packed.
  for (const Optimizer::StateBuffer& s : optimizer_.state())
    for_each_owned(ranges_, optimizer_.owned(), [&](std::int64_t offset, std::int64_t packed, std::int64_t count) {
      ops.apply_mask(s.tensor.f32() + packed, mask.f32() + offset, count);
    });
}

double Pruner::masked_fraction() const {
  std::int64_t masked = 0, total = 0;
  const float* m = mask_.f32();
  for (const Target& t : targets_) {
    total += t.weight.count;
    masked += std::count(m + t.weight.offset, m + t.weight.offset + t.weight.count, 0.0f);
  }
  return total > 0 ? static_cast<double>(masked) / static_cast<double>(total) : 0.0;
}

std::vector<LayerSparsity> Pruner::report() const {
  std::vector<LayerSparsity> out;
  const FullParameters full(model_);
  const Tensor params = to_host(std::as_const(model_).params());
  const float* p = params.f32();
  const float* m = mask_.f32();
  for (const Target& t : targets_) {
    LayerSparsity s;
    s.layer = t.layer;
    s.kind = std::string(t.kind);
    s.weights = t.weight.count;
    s.zeros = std::count(p + t.weight.offset, p + t.weight.offset + t.weight.count, 0.0f);
    if (config_.structured) {
      s.neurons = t.neurons.rows;
      for (std::int64_t r = 0; r < t.neurons.rows; ++r)
        s.neurons_pruned += m[t.neurons.weight_offset + r * t.neurons.cols] == 0.0f ? 1 : 0;
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace ringtrain
