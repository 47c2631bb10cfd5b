// Model: arena layout, activation buffers and the forward/backward sweep over the layers,
// with the low-precision emulation (rounding after every layer) when the compute dtype is not
// f32 on the CPU. On the GPU the same sweep queues device work; nothing is rounded here.
#include "ringtrain/nn/model.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "ringtrain/core/bytes.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/tensor/rounding.hpp"
#include "ringtrain/tensor/tensor_ops.hpp"

namespace ringtrain {
namespace {
using LayerClock = std::chrono::steady_clock;  // set_layer_times
double seconds_since(LayerClock::time_point begin) {
  return std::chrono::duration<double>(LayerClock::now() - begin).count();
}
}  // namespace

Model::Model(std::vector<ModelNode> nodes, const Shape& input_shape, Device device)
    : nodes_(std::move(nodes)), input_shape_(input_shape), device_(device) {
  RT_REQUIRE(!nodes_.empty(), ConfigError, "model: no layers");
  connect(input_shape);
  lay_out_params();
  plan_backward();
  bind_layers(params_);
}

void Model::lay_out_params() {
  struct Tie {
    std::size_t owner, owner_param, user, user_param;
  };
  std::vector<Tie> ties;
  std::vector<ArenaRange> tensor_ranges;  // of the owned parameters, in arena order
  std::int64_t total = 0;                 // the arena's end so far
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    specs_.push_back(nodes_[i].layer->param_specs());
    const auto& specs = specs_.back();
    param_offset_.emplace_back(specs.size(), 0);
    owned_.emplace_back(specs.size(), true);
    for (const ParamTie& tie : nodes_[i].ties) {
      const std::string where = fmt::format("model.layers[{}]", i);
      std::size_t owner = 0;
      while (owner < i && nodes_[owner].name != tie.owner) ++owner;
      RT_REQUIRE(owner < i && tie.param < specs.size() && tie.owner_param < specs_[owner].size(), ConfigError,
                 "{}: parameter {} cannot be tied to parameter {} of an earlier layer named \"{}\"", where, tie.param,
                 tie.owner_param, tie.owner);
      const Shape& mine = specs[tie.param].shape;
      const Shape& theirs = specs_[owner][tie.owner_param].shape;
      RT_REQUIRE(mine == theirs, ConfigError, "{}: {} {} cannot be tied to {}'s {} {}", where, specs[tie.param].name,
                 mine.str(), tie.owner, specs_[owner][tie.owner_param].name, theirs.str());
      owned_[i][tie.param] = false;
      param_offset_[i][tie.param] = param_offset_[owner][tie.owner_param];
      ties.push_back({owner, tie.owner_param, i, tie.param});
    }
    layer_offset_.push_back(ParamLayout::aligned(total));
    std::int64_t count = 0;
    for (std::size_t j = 0; j < specs.size(); ++j) {
      if (!owned_[i][j]) continue;
      param_offset_[i][j] = ParamLayout::aligned(total);
      total = param_offset_[i][j] + specs[j].shape.numel();
      tensor_ranges.push_back({param_offset_[i][j], specs[j].shape.numel()});
      count += specs[j].shape.numel();
    }
    layer_params_.push_back(count);
  }
  layout_ = ParamLayout(std::move(tensor_ranges), total);
  // A tied parameter's gradient is summed in row blocks after the owner's backward where the
  // owner and every user can compute its rows on their own; otherwise each user's goes to a scratch.
  for (const Tie& tie : ties) {
    const bool seen =
        std::any_of(row_ties_.begin(), row_ties_.end(),
                    [&](const RowTie& r) { return r.owner == tie.owner && r.owner_param == tie.owner_param; }) ||
        std::any_of(tied_grads_.begin(), tied_grads_.end(),
                    [&](const TiedGrad& t) { return t.owner == tie.owner && t.owner_param == tie.owner_param; });
    if (seen) continue;
    std::vector<std::pair<std::size_t, std::size_t>> users;
    for (const Tie& t : ties)
      if (t.owner == tie.owner && t.owner_param == tie.owner_param) users.emplace_back(t.user, t.user_param);
    const Shape& shape = specs_[tie.owner][tie.owner_param].shape;
    const bool by_rows = device_ == Device::cpu && shape.rank() == 2 &&
                         nodes_[tie.owner].layer->param_grad_rows_supported(tie.owner_param) &&
                         std::all_of(users.begin(), users.end(), [&](const auto& u) {
                           return nodes_[u.first].layer->param_grad_rows_supported(u.second);
                         });
    if (by_rows) {
      nodes_[tie.owner].layer->defer_param_grad(tie.owner_param);
      for (const auto& [user, param] : users) nodes_[user].layer->defer_param_grad(param);
      row_ties_.push_back({tie.owner, tie.owner_param, users});
      continue;
    }
    for (const auto& [user, param] : users)
      tied_grads_.push_back({tie.owner, tie.owner_param, user, param, Tensor::empty(shape, DType::f32, device_)});
  }
  try {
    params_ = Tensor::empty(Shape{total}, DType::f32, device_);
    grads_ = Tensor::empty(Shape{total}, DType::f32, device_);
  } catch (const std::bad_alloc&) {  // say how large the model is, and where most of it is
    const auto largest =
        static_cast<std::size_t>(std::max_element(layer_params_.begin(), layer_params_.end()) - layer_params_.begin());
    throw HostOutOfMemory(
        fmt::format("for the model's parameters and their gradients: {} floats each, {} in all (the largest layer: "
                    "model.layers[{}]{} with {} parameters)",
                    total, format_bytes(2.0 * 4.0 * static_cast<double>(total)), largest,
                    nodes_[largest].name.empty() ? "" : " (" + nodes_[largest].name + ")", layer_params_[largest]));
  }
}

void Model::connect(const Shape& input_shape) {
  std::vector<std::string> names;  // per node: its output's name ("" unnamed)
  std::vector<bool> read(nodes_.size(), false);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    ModelNode& node = nodes_[i];
    const std::string where =
        node.name.empty() ? fmt::format("model.layers[{}]", i) : fmt::format("model.layers[{}] ({})", i, node.name);
    Layer& layer = *node.layer;
    std::vector<int> reads;
    if (node.inputs.empty()) {
      RT_REQUIRE(layer.num_inputs() == 1, ConfigError,
                 "{}: {} reads {} inputs and names none: list them in inputs (a layer without inputs reads the "
                 "output before it)",
                 where, layer.kind(), layer.num_inputs());
      reads.push_back(i == 0 ? kInput : static_cast<int>(i) - 1);
    } else {
      for (const auto& in : node.inputs) {
        if (in == "input") {
          reads.push_back(kInput);
          continue;
        }
        // "" is also how an unnamed layer's name is held: it must not find the first of them
        RT_REQUIRE(!in.empty(), ConfigError, "{}: an input name is empty; name an earlier layer or \"input\"", where);
        const auto it = std::find(names.begin(), names.end(), in);
        RT_REQUIRE(it != names.end(), ConfigError, "{}: input \"{}\" is not \"input\" or the name of an earlier layer",
                   where, in);
        reads.push_back(static_cast<int>(it - names.begin()));
      }
    }
    RT_REQUIRE(reads.size() == layer.num_inputs(), ConfigError, "{}: {} reads {} input(s), {} given", where,
               layer.kind(), layer.num_inputs(), reads.size());
    RT_REQUIRE(
        node.name.empty() || node.name == "input" || std::find(names.begin(), names.end(), node.name) == names.end(),
        ConfigError, "model.layers[{}]: name \"{}\" is already used", i, node.name);
    RT_REQUIRE(node.name != "input", ConfigError, "model.layers[{}]: name \"input\" is reserved for the model's input",
               i);
    std::vector<Shape> in_shapes;
    for (const int v : reads) {
      if (v != kInput) read[static_cast<std::size_t>(v)] = true;
      in_shapes.push_back(v == kInput ? input_shape : shapes_[static_cast<std::size_t>(v)]);
    }
    if (layer.input_dtype() == DType::i32) {
      RT_REQUIRE(reads.size() == 1 && reads[0] == kInput, ConfigError,
                 "{}: {} reads token ids, so its input must be the model's input", where, layer.kind());
      reads_tokens_ = true;
    }
    try {
      shapes_.push_back(layer.configure_many(in_shapes));
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("{}: {}", where, e.what()));
    }
    names.push_back(node.name);
    reads_.push_back(std::move(reads));
  }
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    for (const int v : reads_[i])
      RT_REQUIRE(v != kInput || !reads_tokens_ || nodes_[i].layer->input_dtype() == DType::i32, ConfigError,
                 "model.layers[{}]: {} reads the model's input, which is token ids (an embedding reads it)", i,
                 nodes_[i].layer->kind());
    RT_REQUIRE(read[i] || i + 1 == nodes_.size(), ConfigError,
               "model.layers[{}]: its output is not read by any later layer (only the last layer's output is the "
               "model's)",
               i);
  }
  declared_reads_ = reads_;
  absorb_producers();
  absorb_consumers();
}

std::vector<int> Model::reader_counts() const {
  std::vector<int> readers(nodes_.size(), 0);
  for (const auto& r : reads_)
    for (const int v : r)
      if (v != kInput) ++readers[static_cast<std::size_t>(v)];
  return readers;
}

void Model::absorb_producers() {
  absorbed_by_.assign(nodes_.size(), -1);
  const std::vector<int> readers = reader_counts();
  std::vector<bool> absorbs(nodes_.size(), false);
  for (std::size_t j = 0; j < nodes_.size(); ++j) {
    if (reads_[j].size() != 1 || reads_[j][0] == kInput) continue;
    const auto p = static_cast<std::size_t>(reads_[j][0]);
    if (readers[p] != 1 || reads_[p].size() != 1 || absorbs[p] || !nodes_[p].layer->param_specs().empty()) continue;
    const int from = reads_[p][0];
    if ((from == kInput ? input_shape_ : shapes_[static_cast<std::size_t>(from)]) != shapes_[p]) continue;
    if (!nodes_[j].layer->absorb_producer(*nodes_[p].layer)) continue;
    absorbed_by_[p] = static_cast<int>(j);
    absorbs[j] = true;
    reads_[j] = reads_[p];
    reads_[p].clear();
  }
}

void Model::absorb_consumers() {
  const std::vector<int> readers = reader_counts();
  std::vector<bool> absorbs(nodes_.size(), false);
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (absorbed_by_[i] >= 0) absorbs[static_cast<std::size_t>(absorbed_by_[i])] = true;
  for (std::size_t c = 0; c + 1 < nodes_.size(); ++c) {  // the last node's output is the model's
    if (absorbed_by_[c] >= 0 || reads_[c].size() != 1 || reads_[c][0] == kInput) continue;
    if (!nodes_[c].layer->param_specs().empty()) continue;
    const auto p = static_cast<std::size_t>(reads_[c][0]);
    if (readers[p] != 1 || absorbs[p] || shapes_[p] != shapes_[c]) continue;
    if (!nodes_[p].layer->absorb_consumer(*nodes_[c].layer)) continue;
    absorbed_by_[c] = static_cast<int>(p);
    absorbs[p] = true;
    reads_[c].clear();
    for (auto& r : reads_)
      for (int& v : r)
        if (v == static_cast<int>(c)) v = static_cast<int>(p);
  }
}

void Model::fuse_producer_gradients() {
  const std::vector<int> readers = reader_counts();
  for (std::size_t j = 0; j < nodes_.size(); ++j)
    for (const int v : reads_[j]) {
      if (v == kInput) continue;
      const auto p = static_cast<std::size_t>(v);
      if (readers[p] == 1 && needs_grad_[p] && !always_passes_through(p))
        (void)nodes_[j].layer->fuse_producer_gradient(*nodes_[p].layer);
    }
}

std::int64_t Model::min_training_batch(std::string* layer) const {
  std::int64_t most = 1;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const std::int64_t need = nodes_[i].layer->min_training_batch();
    if (need <= most) continue;
    most = need;
    if (layer != nullptr) *layer = fmt::format("model.layers[{}] ({})", i, nodes_[i].layer->kind());
  }
  return most;
}

bool Model::has_dropout_masks() const {
  for (const ModelNode& node : nodes_)
    if (node.layer->kind() == "dropout" && !node.layer->passes_through(true)) return true;
  return false;
}

std::size_t Model::layer_done_by(std::size_t i) const {
  return absorbed_by_[i] < 0 ? i : static_cast<std::size_t>(absorbed_by_[i]);
}

void Model::plan_backward() {
  // A value needs a gradient when a parameter lies upstream of it; the model's input never does.
  needs_grad_.assign(nodes_.size(), false);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    bool needed = !specs_[i].empty();  // parameters of its own or tied ones
    for (const int v : reads_[i]) needed = needed || (v != kInput && needs_grad_[static_cast<std::size_t>(v)]);
    needs_grad_[i] = needed;
  }
  fuse_producer_gradients();
  // Backward visits nodes last to first; the first read of a value to be visited writes its
  // gradient, every later one adds to it.
  std::vector<bool> written(nodes_.size(), false);
  adds_grad_.assign(nodes_.size(), {});
  for (std::size_t i = nodes_.size(); i-- > 0;) {
    for (const int v : reads_[i]) {
      const bool adds = v != kInput && written[static_cast<std::size_t>(v)];
      adds_grad_[i].push_back(adds);
      if (v != kInput) written[static_cast<std::size_t>(v)] = true;
    }
  }
  plan_grad_slots();
}

void Model::plan_grad_slots() {
  // A value's gradient lives from the backward of its last reader (which writes it first) to
  // the backward of its producer (which reads it as dy); values whose lives do not overlap share
  // a buffer, the smallest free one that fits (grown when none does). A sequential stack needs
  // two buffers whatever its depth.
  // A pass-through's only input, read by nothing else, takes its output's gradient buffer.
  grad_slot_.assign(nodes_.size(), -1);
  grad_passed_.assign(nodes_.size(), false);
  slot_elems_.clear();
  const std::vector<int> readers = reader_counts();
  std::vector<bool> slot_free;
  const std::size_t last = nodes_.size() - 1;
  for (std::size_t i = last + 1; i-- > 0;) {
    if (!needs_grad_[i]) continue;
    if (i != last && always_passes_through(i) && reads_[i].size() == 1 && reads_[i][0] != kInput) {
      const auto v = static_cast<std::size_t>(reads_[i][0]);
      if (readers[v] == 1 && needs_grad_[v] && grad_slot_[i] >= 0) {
        grad_slot_[v] = grad_slot_[i];  // stays taken until v's producer consumes it
        grad_passed_[i] = true;
        continue;
      }
    }
    for (const int v : reads_[i]) {
      if (v == kInput || !needs_grad_[static_cast<std::size_t>(v)] || grad_slot_[static_cast<std::size_t>(v)] >= 0)
        continue;
      const std::int64_t need = shapes_[static_cast<std::size_t>(v)].numel();
      int best = -1;
      for (std::size_t k = 0; k < slot_elems_.size(); ++k) {
        if (!slot_free[k]) continue;
        const bool fits = slot_elems_[k] >= need;
        const bool better = best < 0 || (fits && (slot_elems_[static_cast<std::size_t>(best)] < need ||
                                                  slot_elems_[k] < slot_elems_[static_cast<std::size_t>(best)]));
        if (better) best = static_cast<int>(k);
      }
      if (best < 0) {
        best = static_cast<int>(slot_elems_.size());
        slot_elems_.push_back(0);
        slot_free.push_back(true);
      }
      auto& elems = slot_elems_[static_cast<std::size_t>(best)];
      elems = std::max(elems, need);
      slot_free[static_cast<std::size_t>(best)] = false;
      grad_slot_[static_cast<std::size_t>(v)] = best;
    }
    if (i != last && grad_slot_[i] >= 0) slot_free[static_cast<std::size_t>(grad_slot_[i])] = true;  // consumed
  }
}

void Model::bind_layers(const Tensor& params) {
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    bind_node(i, [&](std::int64_t offset, const Shape& shape) { return params.flat_slice(offset, shape); });
  if (device_ != Device::cuda || compute_params_.raw() == nullptr) return;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    std::vector<Tensor> compute;
    compute.reserve(specs_[i].size());
    for (std::size_t j = 0; j < specs_[i].size(); ++j)
      compute.push_back(compute_params_.flat_slice(param_offset_[i][j], specs_[i][j].shape));
    nodes_[i].layer->bind_compute(compute);
  }
}

void Model::rebind_layers() { bind_layers(emulated() ? compute_params_ : params_); }

ComputeCopyOut Model::compute_copy() {
  if (device_ != Device::cuda || compute_params_.raw() == nullptr) return {};
  return ComputeCopyOut{compute_params_.raw(), compute_dtype_};
}

void Model::refresh_compute_copy() {
  if (device_ != Device::cuda || compute_params_.raw() == nullptr || !compute_stale_) return;
  cast_into(compute_params_, params_);
  compute_stale_ = false;
}

void Model::bind_node(std::size_t i, const std::function<Tensor(std::int64_t offset, const Shape& shape)>& param_view) {
  std::vector<Tensor> p, g;
  for (std::size_t j = 0; j < specs_[i].size(); ++j) {
    const Shape& shape = specs_[i][j].shape;
    p.push_back(param_view(param_offset_[i][j], shape));
    g.push_back(grad_places_.empty() ? grads_.flat_slice(param_offset_[i][j], shape)
                                     : Tensor::wrap(gradient_at(param_offset_[i][j]), shape, DType::f32, device_));
    for (const TiedGrad& t : tied_grads_)
      if (t.user == i && t.user_param == j) g.back() = t.scratch;
  }
  nodes_[i].layer->bind(p, g);
}

void Model::set_compute_dtype(DType dtype) {
  RT_REQUIRE(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, Error,
             "model: compute dtype {} is not supported (f32, bf16, f16)", dtype_name(dtype));
  RT_REQUIRE(residency_ == nullptr, Error, "model: the compute dtype cannot change while the parameters are sharded");
  compute_dtype_ = dtype;
  if (dtype == DType::f32) {
    compute_params_ = Tensor();
    input_storage_ = Tensor();
    bind_layers(params_);
  } else if (device_ == Device::cuda) {  // the layers read the master and the compute copy
    compute_params_ = Tensor::empty(params_.shape(), dtype, Device::cuda);
    input_storage_ = Tensor();
    rebind_layers();
    compute_stale_ = true;
  } else {
    compute_params_ = Tensor::empty(params_.shape());
    rebind_layers();
    compute_stale_ = true;
  }
  acts_.clear();  // ensure_batch() re-creates the views (and the input buffer) at the next forward
  capacity_ = 0;
}

void Model::init_params(std::uint64_t seed) {
  constexpr std::uint64_t kInitStream = 0x1417'0000'0000'0000ull;
  // Drawn on the host either way, so a GPU model starts from the CPU model's parameters.
  Tensor host = device_ == Device::cpu ? params() : Tensor::empty(params_.shape());
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    for (std::size_t j = 0; j < specs_[i].size(); ++j) {
      if (!owned_[i][j]) continue;  // initialised by its owner
      const auto& s = specs_[i][j];
      Rng rng(stream_key(seed, kInitStream, i, j));
      float* p = host.f32() + param_offset_[i][j];
      const float bound = 1.0f / std::sqrt(static_cast<float>(s.fan_in));
      for (std::int64_t k = 0; k < s.shape.numel(); ++k) {
        switch (s.init) {
          case ParamInit::uniform_fan_in: p[k] = (2.0f * rng.uniform() - 1.0f) * bound; break;
          case ParamInit::ones: p[k] = 1.0f; break;
          case ParamInit::zeros: p[k] = 0.0f; break;
          case ParamInit::normal: p[k] = static_cast<float>(s.std * rng.normal()); break;
        }
      }
    }
  if (device_ != Device::cpu) copy_into(params(), host);
}

void Model::place_gradients(std::vector<GradientPlace> places) {
  std::int64_t at = 0;
  for (const GradientPlace& p : places) {
    RT_REQUIRE(p.offset == at && p.count > 0 && p.data != nullptr, Error,
               "place_gradients: places must tile the gradient arena of {} elements in order", arena_elements());
    at = p.end();
  }
  RT_REQUIRE(at == arena_elements(), Error, "place_gradients: places cover {} of {} elements", at, arena_elements());
  // What backward writes at once stays together: places start only where buckets may be cut.
  const std::vector<std::int64_t> cuts = gradient_cuts();
  for (const GradientPlace& p : places)
    RT_REQUIRE(std::binary_search(cuts.begin(), cuts.end(), p.offset), Error,
               "place_gradients: a place at arena offset {} splits a layer's parameters", p.offset);
  grad_places_ = std::move(places);
  grads_ = Tensor();
  rebind_layers();
}

float* Model::gradient_at(std::int64_t offset) {
  if (grad_places_.empty()) return grads_.f32() + offset;
  const auto p = std::upper_bound(grad_places_.begin(), grad_places_.end(), offset,
                                  [](std::int64_t o, const GradientPlace& g) { return o < g.offset; });
  const GradientPlace& g = *std::prev(p);
  return g.data + (offset - g.offset);
}

std::int64_t Model::parameter_bytes() const {
  return static_cast<std::int64_t>(allocated_bytes(params_) + allocated_bytes(compute_params_));
}

std::int64_t Model::tied_gradient_bytes() const {
  std::size_t bytes = 0;
  for (const TiedGrad& t : tied_grads_) bytes += allocated_bytes(t.scratch);
  return static_cast<std::int64_t>(bytes);
}

std::int64_t Model::activation_bytes() const {
  std::size_t bytes = allocated_bytes(input_storage_);
  for (const std::vector<Tensor>* list : {&act_storage_, &grad_storage_, &scratch_storage_})
    for (const Tensor& t : *list) bytes += allocated_bytes(t);
  return static_cast<std::int64_t>(bytes);
}

void Model::ensure_batch(std::int64_t n) {
  if (n > capacity_) {
    act_storage_.clear();
    grad_storage_.clear();
    for (std::size_t i = 0; i < shapes_.size(); ++i)
      act_storage_.push_back(absorbed_by_[i] >= 0 || always_passes_through(i)
                                 ? Tensor()
                                 : Tensor::empty(shapes_[i].with_batch(n), activation_dtype(), device_));
    for (const std::int64_t elems : slot_elems_)
      grad_storage_.push_back(Tensor::empty(Shape{elems * n}, activation_dtype(), device_));
    if (emulated() && !reads_tokens_) input_storage_ = Tensor::empty(input_shape_.with_batch(n));
    scratch_storage_.clear();
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      for (std::size_t k = 0; k < reads_[i].size(); ++k) {
        if (!adds_grad_[i][k]) continue;
        const std::int64_t need = shapes_[static_cast<std::size_t>(reads_[i][k])].numel() * n;
        if (scratch_storage_.size() <= k) scratch_storage_.resize(k + 1);
        if (scratch_storage_[k].numel() < need)
          scratch_storage_[k] = Tensor::empty(Shape{need}, activation_dtype(), device_);
      }
    capacity_ = n;
  }
  if (acts_.empty() || views_batch_ != n) {
    views_batch_ = n;
    acts_.clear();
    dacts_.clear();
    for (std::size_t i = 0; i < shapes_.size(); ++i) {
      acts_.push_back(act_storage_[i].raw() == nullptr ? Tensor() : act_storage_[i].rows(0, n));  // forward views
      const int slot = grad_slot_[i];
      dacts_.push_back(
          slot < 0 ? Tensor() : grad_storage_[static_cast<std::size_t>(slot)].flat_slice(0, shapes_[i].with_batch(n)));
    }
  }
}

const Tensor& Model::forward(const Tensor& x, const StepInfo& info) {
  RT_REQUIRE(x.shape().rank() >= 1 && x.shape().sample() == input_shape_, Error,
             "model input {} does not match the configured per-sample shape {}", x.shape().str(), input_shape_.str());
  RT_REQUIRE(x.device() == device_ && x.dtype() == input_dtype(), Error,
             "model input is {} on the {}, the model reads {} on the {}", dtype_name(x.dtype()),
             x.device() == Device::cuda ? "GPU" : "CPU", dtype_name(input_dtype()),
             device_ == Device::cuda ? "GPU" : "CPU");
  RT_REQUIRE(!params_released_, Error,
             "model: its parameters were left sharded by a ZeRO stage 3 step (gather them with FullParameters while "
             "the step exists)");
  const std::int64_t n = x.shape()[0];
  ensure_batch(n);
  prepare_compute(x);
  std::vector<const Tensor*> in;
  if (residency_ != nullptr) residency_->begin_pass(ParameterResidency::Pass::forward, info.training);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (absorbed_by_[i] >= 0) continue;  // its absorber does its work
    in.clear();
    for (const int v : reads_[i]) in.push_back(&value(v));
    if (nodes_[i].layer->passes_through(info.training)) {  // a view of the input, no pass over it
      acts_[i] = in.front()->reshape(shapes_[i].with_batch(n));
      continue;
    }
    if (acts_[i].raw() != act_storage_[i].raw()) acts_[i] = act_storage_[i].rows(0, n);  // a view last pass
    acquire_params(i, ParameterResidency::Pass::forward);
    const auto begin = layer_times_ != nullptr ? LayerClock::now() : LayerClock::time_point{};
    nodes_[i].layer->forward_many(in, acts_[i], info);
    if (layer_times_ != nullptr) layer_times_->forward[i] += seconds_since(begin);
    release_params(i, ParameterResidency::Pass::forward);
    if (emulated()) round_in_place(acts_[i].f32(), acts_[i].numel(), compute_dtype_);
  }
  return acts_.back();
}

void Model::prepare_compute(const Tensor& x) {
  refresh_compute_copy();
  if (!emulated()) {
    input_ = x;
    return;
  }
  if (compute_stale_ && residency_ == nullptr) {  // with one, each node's at its acquire
    std::memcpy(compute_params_.f32(), params_.f32(), params_.nbytes());
    round_in_place(compute_params_.f32(), compute_params_.numel(), compute_dtype_);
    compute_stale_ = false;
  }
  if (reads_tokens_) {  // token ids are exact: nothing to round
    input_ = x;
    return;
  }
  input_ = input_storage_.rows(0, x.shape()[0]);
  std::memcpy(input_.f32(), x.f32(), x.nbytes());
  round_in_place(input_.f32(), input_.numel(), compute_dtype_);
}

void Model::backward(const Tensor& dlogits, const GradReadyHook& on_ready) {
  const std::size_t last = nodes_.size() - 1;
  RT_REQUIRE(dlogits.shape() == acts_[last].shape(), Error, "backward: gradient shape {} != output shape {}",
             dlogits.shape().str(), acts_[last].shape().str());
  // Nodes whose output needs no gradient (upstream of every parameter) are skipped, and an
  // input that needs none gets no gradient (for the MLP this skips a third of the first GEMM's
  // backward).
  std::vector<const Tensor*> x;
  std::vector<Tensor*> dx;
  if (residency_ != nullptr) residency_->begin_pass(ParameterResidency::Pass::backward, true);
  for (std::size_t i = last + 1; i-- > 0;) {
    if (!needs_grad_[i] || grad_passed_[i]) continue;  // a passed gradient is already its input's
    const Tensor& dy = i == last ? dlogits : dacts_[i];
    x.clear();
    dx.clear();
    for (std::size_t k = 0; k < reads_[i].size(); ++k) {
      const int v = reads_[i][k];
      x.push_back(&value(v));
      if (v == kInput || !needs_grad_[static_cast<std::size_t>(v)]) {
        dx.push_back(nullptr);
      } else if (adds_grad_[i][k]) {
        scratch_.resize(reads_[i].size());
        scratch_[k] = scratch_storage_[k].flat_slice(0, dacts_[static_cast<std::size_t>(v)].shape());
        dx.push_back(&scratch_[k]);
      } else {
        dx.push_back(&dacts_[static_cast<std::size_t>(v)]);
      }
    }
    acquire_params(i, ParameterResidency::Pass::backward);
    const auto begin = layer_times_ != nullptr ? LayerClock::now() : LayerClock::time_point{};
    nodes_[i].layer->backward_many(x, acts_[i], dy, dx);
    if (layer_times_ != nullptr) layer_times_->backward[i] += seconds_since(begin);
    release_params(i, ParameterResidency::Pass::backward);
    for (std::size_t k = 0; k < dx.size(); ++k) {
      if (dx[k] == nullptr) continue;
      if (emulated()) round_in_place(dx[k]->f32(), dx[k]->numel(), compute_dtype_);
      if (adds_grad_[i][k]) {
        Tensor& sum = dacts_[static_cast<std::size_t>(reads_[i][k])];
        add_into(sum, *dx[k]);
        if (emulated()) round_in_place(sum.f32(), sum.numel(), compute_dtype_);
      }
    }
    for (const TiedGrad& t : tied_grads_)
      if (t.owner == i)
        add_into(Tensor::wrap(gradient_at(param_offset_[i][t.owner_param]), t.scratch.shape(), DType::f32, device_),
                 t.scratch);
    if (emulated())
      for (std::size_t j = 0; j < specs_[i].size(); ++j)
        if (owned_[i][j] && !row_blocked(i, j))
          round_in_place(gradient_at(param_offset_[i][j]), specs_[i][j].shape.numel(), compute_dtype_);
    for (const RowTie& t : row_ties_)
      if (t.owner == i) sum_tied_rows(t, on_ready);
    if (on_ready && layer_params_[i] > 0) on_ready(layer_offset_[i]);
  }
}

bool Model::row_blocked(std::size_t node, std::size_t param) const {
  return std::any_of(row_ties_.begin(), row_ties_.end(),
                     [&](const RowTie& t) { return t.owner == node && t.owner_param == param; });
}

std::int64_t Model::rows_per_block(const RowTie& t) const {
  const std::int64_t width = specs_[t.owner][t.owner_param].shape[1];
  return std::max<std::int64_t>(1, kGradientBlockElements / width);
}

// The owner's parameters after the tied one are written by its backward: their buckets may go
// first. Then the blocks from the last row down (the buckets' launch order), each summed where
// its bucket stages it: the users' rows in node order (the first writes), then the owner's.
void Model::sum_tied_rows(const RowTie& t, const GradReadyHook& on_ready) {
  const Shape& shape = specs_[t.owner][t.owner_param].shape;
  const std::int64_t rows = shape[0], width = shape[1], offset = param_offset_[t.owner][t.owner_param];
  const std::int64_t block = rows_per_block(t);
  if (on_ready) on_ready(offset + rows * width);
  for (std::int64_t r0 = (rows - 1) / block * block; r0 >= 0; r0 -= block) {
    const std::int64_t r1 = std::min(rows, r0 + block);
    float* out = gradient_at(offset + r0 * width);
    bool add = false;
    for (const auto& [user, param] : t.users) {
      nodes_[user].layer->param_grad_rows(param, r0, r1, out, add);
      add = true;
    }
    nodes_[t.owner].layer->param_grad_rows(t.owner_param, r0, r1, out, true);
    if (emulated()) round_in_place(out, (r1 - r0) * width, compute_dtype_);
    if (on_ready) on_ready(offset + r0 * width);
  }
}

void Model::set_layer_times(LayerTimes* times) {
  RT_REQUIRE(times == nullptr || device_ == Device::cpu, Error,
             "set_layer_times: host models only (a GPU layer's call returns before its kernels finish)");
  layer_times_ = times;
  if (times == nullptr) return;
  times->forward.assign(nodes_.size(), 0.0);
  times->backward.assign(nodes_.size(), 0.0);
}

std::string_view Model::layer_kind(std::size_t i) const { return nodes_[i].layer->kind(); }

std::int64_t Model::layer_forward_flops(std::size_t i) const { return nodes_[i].layer->forward_flops_per_sample(); }

void Model::set_parameter_residency(ParameterResidency* residency) {
  if (device_ == Device::cuda && residency != nullptr) {  // may allocate: before anything changes
    if (params_reservable_) {
      commit_pages(params_.f32(), params_.numel(), device_);  // what an earlier residency released
    } else {
      Tensor moved = Tensor::reservable(params_.shape(), DType::f32, device_);
      copy_into(moved, params_);
      params_ = moved;
      params_reservable_ = true;
    }
    compute_params_ = Tensor();  // the residency's copies instead (compute_where)
  }
  // Detached, a GPU arena keeps its released granules unmapped (a detach allocates nothing: it
  // runs in destructors); forward refuses to run on it.
  params_released_ = device_ == Device::cuda && residency == nullptr && params_reservable_;
  residency_ = residency;
  compute_stale_ = true;
  rebind_layers();  // back on the arena until an acquire
}

std::vector<std::size_t> Model::param_users(ParameterResidency::Pass pass) const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < nodes_.size(); ++i)  // a node with parameters always needs its gradient
    if (!specs_[i].empty()) out.push_back(i);
  if (pass == ParameterResidency::Pass::backward) std::reverse(out.begin(), out.end());
  return out;
}

std::vector<ArenaRange> Model::node_param_ranges(std::size_t node) const {
  std::vector<ArenaRange> out;
  out.reserve(specs_[node].size());
  for (std::size_t j = 0; j < specs_[node].size(); ++j)
    out.push_back({param_offset_[node][j], specs_[node][j].shape.numel()});
  return out;
}

void Model::acquire_params(std::size_t i, ParameterResidency::Pass pass) {
  if (residency_ == nullptr || specs_[i].empty()) return;
  residency_->acquire(i, pass);
  if (!emulated()) {  // the layer computes on the gathered copy itself (on a GPU in bf16/f16: its compute copy)
    bind_node(i, [&](std::int64_t offset, const Shape& shape) {
      return Tensor::wrap(residency_->where(offset), shape, DType::f32, device_);
    });
    if (device_ == Device::cuda && compute_dtype_ != DType::f32) {
      std::vector<Tensor> compute;
      compute.reserve(specs_[i].size());
      for (std::size_t j = 0; j < specs_[i].size(); ++j)
        compute.push_back(
            Tensor::wrap(residency_->compute_where(param_offset_[i][j]), specs_[i][j].shape, compute_dtype_, device_));
      nodes_[i].layer->bind_compute(compute);
    }
    return;
  }
  for (const ArenaRange& r : node_param_ranges(i)) {  // the layers stay bound to the compute copy
    float* to = compute_params_.f32() + r.offset;
    std::memcpy(to, residency_->where(r.offset), static_cast<std::size_t>(r.count) * sizeof(float));
    round_in_place(to, r.count, compute_dtype_);
  }
}

void Model::release_params(std::size_t i, ParameterResidency::Pass pass) {
  if (residency_ == nullptr || specs_[i].empty()) return;
  if (emulated())  // rounded again at the next acquire
    for (const ArenaRange& r : node_param_ranges(i)) release_host_pages(compute_params_.f32() + r.offset, r.count);
  residency_->release(i, pass);
}

FullParameters::FullParameters(const Model& model) : residency_(model.parameter_residency()) {
  if (residency_ != nullptr) residency_->gather_all();
}

FullParameters::~FullParameters() {
  if (residency_ == nullptr) return;
  try {
    residency_->release_all();
  } catch (const std::exception& e) {  // the parameters stay gathered: more memory, still correct
    log::warn("model: releasing the gathered parameters: {}", e.what());
  }
}

void Model::begin_step(const StepInfo& info) {
  for (const auto& node : nodes_) node.layer->begin_step(info);
}

void Model::start_decoding(std::int64_t max_positions) {
  for (const auto& node : nodes_) node.layer->start_decoding(max_positions);
}

std::vector<std::int64_t> Model::gradient_cuts() const {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (layer_params_[i] > 0) out.push_back(layer_offset_[i]);
  for (const RowTie& t : row_ties_) {
    const Shape& shape = specs_[t.owner][t.owner_param].shape;
    const std::int64_t offset = param_offset_[t.owner][t.owner_param], block = rows_per_block(t) * shape[1];
    for (std::int64_t at = offset + block; at < offset + shape.numel(); at += block) out.push_back(at);
    if (offset + shape.numel() < arena_elements()) out.push_back(offset + shape.numel());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<Model::ParamTensor> Model::param_tensors() const {
  std::vector<ParamTensor> out;
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    for (std::size_t j = 0; j < specs_[i].size(); ++j)
      if (owned_[i][j])
        out.push_back({i, nodes_[i].layer->kind(), specs_[i][j].name, specs_[i][j].shape, param_offset_[i][j]});
  return out;
}

std::vector<Tensor> Model::buffers() {
  std::vector<Tensor> out;
  for (auto& node : nodes_)
    for (auto& b : node.layer->buffers()) out.push_back(b);
  return out;
}

std::int64_t Model::train_flops_per_sample() const {
  std::int64_t f = 0;
  for (const auto& node : nodes_) f += node.layer->forward_flops_per_sample();
  return 3 * f;
}

std::string Model::describe() const {
  std::vector<std::string> labels, shapes;  // padded to the longest of each, so the columns line up
  std::size_t label_width = 0, shape_width = 0;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    std::string label = fmt::format("[{}] {}", i, nodes_[i].layer->kind());
    const std::vector<int>& reads = declared_reads_[i];
    const bool sequential = reads.size() == 1 && reads[0] == static_cast<int>(i) - 1;
    if (!sequential) {
      std::string from;
      for (const int v : reads) from += (from.empty() ? "" : ", ") + (v == kInput ? "input" : std::to_string(v));
      label += fmt::format("({})", from);
    }
    if (!nodes_[i].name.empty()) label += " " + nodes_[i].name;
    labels.push_back(std::move(label));
    shapes.push_back(shapes_[i].str());
    label_width = std::max(label_width, labels.back().size());
    shape_width = std::max(shape_width, shapes.back().size());
  }
  std::string s;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const std::string fused = absorbed_by_[i] >= 0 ? fmt::format("  (done by [{}])", absorbed_by_[i]) : "";
    s += fmt::format("  {:<{}} -> {:<{}} {:>10} params{}\n", labels[i], label_width, shapes[i], shape_width,
                     layer_params_[i], fused);
  }
  return s;
}

}  // namespace ringtrain
