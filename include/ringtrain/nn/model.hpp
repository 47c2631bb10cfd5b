// Model: a graph of layers with one flat arena for parameters and one for gradients (layers
// hold views). Each node reads named values (the model input or earlier nodes' outputs), so a
// residual addition is an ordinary two-input layer; a sequential stack is the special case
// where every node reads the one before it. Nodes are kept in the order given (a topological
// order: a node reads only earlier values), backward runs them in reverse, and a value read by
// several nodes gets the sum of their gradients. Flat arenas make the gradient allreduce copy-free, and buckets and
// checkpoint slices are just ranges of them. Activations are preallocated per batch size.
// Mixed precision: the f32 arena is the master copy; the layers compute on a rounded copy.
// On the GPU the arenas and activations live on the device and the CUDA layers cast the
// master weights to the compute dtype themselves; activations are stored in that dtype.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/nn/layer.hpp"
#include "ringtrain/optim/update_rules.hpp"
#include "ringtrain/tensor/arena_range.hpp"
#include "ringtrain/tensor/param_layout.hpp"

namespace ringtrain {

class Config;

// One node of the graph: a layer, the name of its output value (optional) and the values it
// reads: "input" (the model's input) or earlier nodes' names; empty: the previous node's output
// (the model input for the first node).
// A parameter of a node that is another node's (tied weights: a language model's output
// projection and its token embedding): `param` of this node is `owner_param` of the earlier node
// named `owner`. The owner holds it in the arenas; its gradient is the sum of both uses.
struct ParamTie {
  std::size_t param = 0;
  std::string owner;
  std::size_t owner_param = 0;
};

struct ModelNode {
  std::unique_ptr<Layer> layer;
  std::string name;
  std::vector<std::string> inputs;
  std::vector<ParamTie> ties;
};

// Where a sharded model's parameters come from (ZeRO stage 3): between uses, a node's parameters
// need not be anywhere. The model calls acquire just before a node with parameters runs in a
// pass (from its return until release, `where` tells where each of the node's parameters, tied
// ones included, lives) and release just after, in the order of Model::param_users; begin_pass
// starts each pass.
class ParameterResidency {
 public:
  enum class Pass { forward, backward };
  virtual ~ParameterResidency() = default;
  // training: a backward pass follows this forward (StepInfo::training).
  virtual void begin_pass(Pass pass, bool training) = 0;
  virtual void acquire(std::size_t node, Pass pass) = 0;
  virtual void release(std::size_t node, Pass pass) = 0;
  // The address of arena element `offset` of an acquired node's parameters (the same layout).
  virtual float* where(std::int64_t offset) = 0;
  // A GPU model computing in bf16/f16: the address of that element in the compute dtype, a
  // copy of where's values made for the acquire (the model binds its layers' compute views to it).
  virtual void* compute_where(std::int64_t offset) = 0;
  // For a reader of every parameter between passes (a pruning mask update): the whole arena in
  // place (in Model::params) until release_all. Collective when the parameters are sharded (every rank at once).
  virtual void gather_all() = 0;
  virtual void release_all() = 0;
};

class Model {
 public:
  // Configures every layer for the per-sample input shape and lays out the arenas on
  // `device` (the layers must compute there: CUDA layers for Device::cuda). The last node's
  // output is the model's; every other node's output must be read. ConfigError names the node
  // ("model.layers[i]") for an unknown or later input, a wrong input count or shape.
  Model(std::vector<ModelNode> nodes, const Shape& input_shape, Device device = Device::cpu);

  // Initialises all parameters from one seeded stream (the trainer then broadcasts rank
  // 0's parameters so every rank starts identical whatever the seed handling).
  void init_params(std::uint64_t seed);

  // Runs the network on x [N, ...input] (on the model's device, in input_dtype());
  // returns the logits [N, ...output] (owned by the model, valid until the next forward).
  const Tensor& forward(const Tensor& x, const StepInfo& info);
  // Called during backward each time a layer with parameters is done: every gradient from
  // element `ready_from` of the arena to its end is final (layers are laid out in forward
  // order, so readiness grows from the end of the arena towards its start).
  using GradReadyHook = std::function<void(std::int64_t ready_from)>;
  // Back-propagates dlogits (same shape as the last forward's output) into the gradient arena.
  void backward(const Tensor& dlogits, const GradReadyHook& on_ready = {});

  // Compute precision: f32 (default), bf16 or f16. Otherwise the layers are bound to a
  // second arena holding the master parameters rounded to it, refreshed before the next
  // forward whenever the master may have changed; every layer's output, input gradient and
  // parameter gradients are rounded to it (the CPU emulation of low-precision activations
  // and GEMMs with f32 accumulation). Gradients stay in the f32 gradient arena.
  void set_compute_dtype(DType dtype);
  DType compute_dtype() const { return compute_dtype_; }
  Device device() const { return device_; }
  // The dtype of inputs, activations and their gradients: the compute dtype on the GPU, f32
  // storage (holding rounded values) on the CPU.
  DType activation_dtype() const { return device_ == Device::cuda ? compute_dtype_ : DType::f32; }
  // The dtype of the model's input: i32 when it is read by an embedding (token ids), else the
  // activation dtype.
  DType input_dtype() const { return reads_tokens_ ? DType::i32 : activation_dtype(); }

  // The f32 master parameters (optimizer, checkpoints, broadcast, pruning). Any non-const
  // access counts as a change: the compute copy is refreshed at the next forward (so callers
  // must not keep the pointer across a forward to write through it later).
  Tensor& params() {
    compute_stale_ = true;
    return params_;
  }
  const Tensor& params() const { return params_; }
  // A GPU model computing in bf16/f16: its compute copy of the parameters (the arena in that
  // dtype, which its layers' GEMMs and convolutions read), for an optimizer update that writes it
  // with the master (Optimizer::step's copy); then compute_copy_written() says it is current.
  // Other changes of the master are cast into it before the next forward (refresh_compute_copy,
  // which a caller about to replay a CUDA graph calls, since the replay runs no host code).
  // None on the CPU or in f32.
  ComputeCopyOut compute_copy();
  void compute_copy_written() { compute_stale_ = false; }
  void refresh_compute_copy();
  // The gradient arena; empty once place_gradients moved the gradients elsewhere.
  Tensor& grads() { return grads_; }
  // Where runs of the gradient arena live instead of the arena itself (ZeRO stage 2: each
  // gradient bucket in a staging buffer, never all of them at once): `count` elements from
  // arena element `offset` on live at `data`, in arena order. Places are sorted, disjoint,
  // cover the arena and start only at gradient_cuts(); buffers may be shared between places
  // whose lives the caller keeps apart, and keeps them alive while backward may run; on the
  // model's device. Rebinds the layers and frees the arena.
  struct GradientPlace {
    std::int64_t offset = 0, count = 0;
    float* data = nullptr;
    std::int64_t end() const { return offset + count; }
  };
  void place_gradients(std::vector<GradientPlace> places);
  // Where element `offset` of the gradient arena lives (the arena, or its place).
  float* gradient_at(std::int64_t offset);
  // Parameters kept elsewhere between uses (ZeRO stage 3; null: always in the arena, the
  // default). At each acquire the node's layer is bound to where its parameters are; with a
  // low-precision compute dtype its compute copy is rounded from there on the CPU (rather than
  // the whole arena's before a forward), and on the GPU is the residency's (compute_where), the
  // model keeping no compute copy of its own. A GPU arena moves into Tensor::reservable memory
  // (so that the residency can release its pages); detached again, it keeps them released and
  // the model no longer runs (Error), as detaching allocates nothing.
  void set_parameter_residency(ParameterResidency* residency);
  ParameterResidency* parameter_residency() const { return residency_; }
  // The nodes that use parameters in a pass, in the order it runs them (backward skips nodes
  // whose output needs no gradient).
  std::vector<std::size_t> param_users(ParameterResidency::Pass pass) const;
  // The arena ranges of node i's parameters (a tied one's at its owner's), in parameter order.
  std::vector<ArenaRange> node_param_ranges(std::size_t node) const;
  // The parameters: their number (tied ones once, pads not counted) and where they sit in the
  // arenas, whose elements (pads included) size every arena-shaped buffer: gradients, optimizer
  // state, pruning mask, ZeRO shards. Each parameter tensor starts at a multiple of
  // ParamLayout::kAlignElements (256 bytes in a 2-byte compute copy).
  std::int64_t num_params() const { return layout_.logical_elements(); }
  std::int64_t arena_elements() const { return layout_.arena_elements(); }
  const ParamLayout& param_layout() const { return layout_; }
  // Arena offsets where gradient buckets may be cut, ascending: where each layer with parameters
  // starts and, in a tied parameter summed by rows (a GPT's token table), every block of about
  // kGradientBlockElements and its end.
  std::vector<std::int64_t> gradient_cuts() const;
  static constexpr std::int64_t kGradientBlockElements = std::int64_t{1} << 18;  // 1 MiB of f32
  // One entry per parameter tensor, in arena order (pruning selects weights by layer kind).
  struct ParamTensor {
    std::size_t layer;      // node index (in model.layers)
    std::string_view kind;  // the layer's kind: "linear", "conv2d", ...
    std::string name;       // "weight", "bias", ...
    Shape shape;
    std::int64_t offset;  // first arena element
  };
  std::vector<ParamTensor> param_tensors() const;
  std::vector<Tensor> buffers();  // non-parameter state (BatchNorm running statistics)
  // Bytes of the parameter arenas: the f32 master and, in a low precision, the compute copy.
  std::int64_t parameter_bytes() const;
  // Bytes of gradient buffers besides the arena: the scratch of tied parameters whose owner
  // cannot add to what a user wrote (then the user computes its gradient there and the owner's
  // backward adds it).
  std::int64_t tied_gradient_bytes() const;
  // Bytes of the activation buffers at the largest batch run so far: every node's output, the
  // shared gradient buffers, the scratch for summed gradients and the rounded input (the layers'
  // own saved state, such as attention statistics, is not counted).
  std::int64_t activation_bytes() const;
  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const { return shapes_.back(); }
  // Training FLOPs per sample: forward + backward, counted as 3 x forward (2 per MAC).
  std::int64_t train_flops_per_sample() const;
  std::size_t num_layers() const { return nodes_.size(); }
  // The fewest samples a training forward can take (Layer::min_training_batch over the nodes);
  // `layer`, if given, gets the first node that needs that many ("model.layers[3] (batchnorm2d)").
  std::int64_t min_training_batch(std::string* layer = nullptr) const;
  // True when a training forward draws dropout masks (a dropout layer with p > 0).
  bool has_dropout_masks() const;
  // Buffers the values' gradients share in backward (2 for a sequential stack of any depth).
  std::size_t gradient_buffers() const { return slot_elems_.size(); }
  // Node i's name ("" when unnamed; the GPT family names its nodes after GPT-2's modules).
  const std::string& layer_name(std::size_t i) const { return nodes_[i].name; }
  // Node i's layer kind ("conv2d", "linear", ...) and its forward FLOPs per sample.
  std::string_view layer_kind(std::size_t i) const;
  std::int64_t layer_forward_flops(std::size_t i) const;
  // The node whose layer does node i's work: i itself; the only reader of i's output when that
  // layer absorbed i's (Layer::absorb_producer: a ReLU into the max-pool after it); or the node
  // whose output i alone reads when that layer absorbed i's (Layer::absorb_consumer: a ReLU into
  // the linear before it). An absorbed node is skipped by both passes and has no activation buffer.
  std::size_t layer_done_by(std::size_t i) const;
  // Per-node wall time of forward and backward, in seconds, added to on every pass while set
  // (null: none, the default; host models only, where a layer's call is its work). For
  // `bench train --layers`: the caller reads and clears it.
  struct LayerTimes {
    std::vector<double> forward, backward;
  };
  void set_layer_times(LayerTimes* times);
  // Layer::begin_step of every layer: before each training step's forward, outside a CUDA graph.
  void begin_step(const StepInfo& info);
  // Layer::start_decoding of every layer (inference only): from then on forward reads one
  // sequence, its batch rows being positions StepInfo::position, position + 1, ... of it (for a
  // model of per-sample input [1]: x [n, 1] holds n consecutive tokens), and returns their logits
  // attending over every position forwarded before (a KV cache of max_positions rows).
  void start_decoding(std::int64_t max_positions);
  std::string describe() const;  // one line per node: kind, inputs, output shape, parameters

 private:
  // Resolves the nodes' input names and configures the layers (the constructor's first half).
  void connect(const Shape& input_shape);
  // Arena offsets of every parameter (a tied one at its owner's), and the owners' gradient
  // scratch buffers (the constructor's second half).
  void lay_out_params();
  // Lets each node absorb the one-input, parameter-free node whose output only it reads
  // (Layer::absorb_producer): it then reads that node's input instead (connect's last step).
  void absorb_producers();
  std::vector<int> reader_counts() const;  // per node: how many reads of its output reads_ holds
  // Then lets each node absorb the one-input, parameter-free node that alone reads its output
  // (Layer::absorb_consumer): that node's readers then read this one's output instead.
  void absorb_consumers();
  // Then asks each node, for each value only it reads whose gradient is needed, whether it
  // applies the gradient rule its producer absorbed (Layer::fuse_producer_gradient).
  void fuse_producer_gradients();
  // Which values need a gradient and which reads of a value add to a gradient already written.
  void plan_backward();
  // Which gradient buffer each value's gradient uses (buffers shared between disjoint lives).
  void plan_grad_slots();
  bool always_passes_through(std::size_t i) const { return nodes_[i].layer->passes_through(true); }
  void ensure_batch(std::int64_t n);
  void bind_layers(const Tensor& params);
  // The layers bound to the parameters they compute on: the emulated low-precision copy on the
  // CPU, else the f32 master (a GPU model's layers get its compute copy through bind_compute).
  void rebind_layers();
  // Binds node i's parameters to param_view(arena offset, shape) and its gradients where they live.
  void bind_node(std::size_t i, const std::function<Tensor(std::int64_t offset, const Shape& shape)>& param_view);
  const Tensor& value(int v) const { return v == kInput ? input_ : acts_[static_cast<std::size_t>(v)]; }
  // Sets input_ to x itself or (low precision) a rounded copy of it, after refreshing the
  // compute parameters if the master changed.
  void prepare_compute(const Tensor& x);
  // The CPU emulation of a low-precision compute dtype (rounding after every layer).
  bool emulated() const { return device_ == Device::cpu && compute_dtype_ != DType::f32; }
  // ParameterResidency::acquire of node i (then, emulated, its compute copy from the master).
  void acquire_params(std::size_t i, ParameterResidency::Pass pass);
  void release_params(std::size_t i, ParameterResidency::Pass pass);

  static constexpr int kInput = -1;  // the value index of the model's input

  std::vector<ModelNode> nodes_;
  std::vector<std::vector<int>> reads_;           // per node: the value indices it reads (kInput or a node)
  std::vector<std::vector<int>> declared_reads_;  // reads_ as the description gave them (before absorbing)
  std::vector<int> absorbed_by_;                  // per node: the node doing its work (-1: itself)
  Shape input_shape_;
  bool reads_tokens_ = false;               // the input is token ids (an embedding reads it)
  std::vector<Shape> shapes_;               // per-sample output shape of each node
  std::vector<std::int64_t> layer_params_;  // parameter count per node
  ParamLayout layout_;                      // where the owned parameter tensors sit in the arenas
  std::vector<std::int64_t> layer_offset_;  // first arena element of each node's parameters
  std::vector<bool> needs_grad_;            // per node: its output's gradient is needed
  // per node and input: the gradient goes to a scratch buffer then is added to the value's
  // (another reader, later in the graph, wrote it first)
  std::vector<std::vector<bool>> adds_grad_;
  std::vector<std::vector<ParamSpec>> specs_;
  std::vector<std::vector<std::int64_t>> param_offset_;  // per node and parameter (a tied one: its owner's)
  std::vector<std::vector<bool>> owned_;                 // per node and parameter: in the arena here (not tied)
  // A tied parameter's gradient: summed by row blocks after the owner's backward, one gradient
  // bucket at a time, where the owner and its users can compute rows on their own (RowTie; the
  // layers' backward leaves it out); otherwise each user computes its gradient into a scratch
  // buffer, added to the arena's after the owner's backward wrote it there (TiedGrad).
  struct TiedGrad {
    std::size_t owner, owner_param, user, user_param;
    Tensor scratch;
  };
  std::vector<TiedGrad> tied_grads_;
  struct RowTie {
    std::size_t owner, owner_param;
    std::vector<std::pair<std::size_t, std::size_t>> users;  // (node, parameter), in node order
  };
  std::vector<RowTie> row_ties_;
  bool row_blocked(std::size_t node, std::size_t param) const;  // a RowTie's owner parameter
  std::int64_t rows_per_block(const RowTie& t) const;
  void sum_tied_rows(const RowTie& t, const GradReadyHook& on_ready);
  Tensor params_, grads_;
  std::vector<GradientPlace> grad_places_;  // empty: the gradients live in grads_
  ParameterResidency* residency_ = nullptr;
  bool params_reservable_ = false;     // a GPU arena moved into Tensor::reservable memory for a residency
  bool params_released_ = false;       // a GPU arena left with granules unmapped by a detached residency
  LayerTimes* layer_times_ = nullptr;  // set_layer_times
  Device device_;
  DType compute_dtype_ = DType::f32;
  // not f32: the rounded copy the layers are bound to (CPU: an f32 arena of rounded values;
  // GPU: the arena in the compute dtype, with the f32 master bound too)
  Tensor compute_params_;
  bool compute_stale_ = true;         // compute_params_ must be refreshed from params_
  Tensor input_storage_;              // not f32: the rounded input, at capacity_
  std::int64_t capacity_ = 0;         // batch size the activation buffers hold
  std::vector<Tensor> act_storage_;   // per node output, at capacity_
  std::vector<Tensor> grad_storage_;  // per gradient slot, at capacity_
  std::vector<int> grad_slot_;        // per node: its output gradient's slot (-1: none)
  // per node: a pass-through (Layer::passes_through in training) whose input's gradient is its
  // output's, the same slot: backward has nothing to do for it
  std::vector<bool> grad_passed_;
  std::vector<std::int64_t> slot_elems_;           // per slot: elements per sample
  std::vector<Tensor> acts_, dacts_;               // views of the current batch size
  std::int64_t views_batch_ = 0;                   // that batch size
  std::vector<Tensor> scratch_storage_, scratch_;  // per input slot: gradients to add (see adds_grad_)
  Tensor input_;                                   // view of the last forward's (rounded) input
};

// The whole parameter arena in place for a scope, for a reader of every parameter: nothing to do
// unless the model's parameters are sharded (ZeRO stage 3), where it is a collective (every rank
// at once) that gathers them, released again at the end of the scope.
class FullParameters {
 public:
  explicit FullParameters(const Model& model);
  ~FullParameters();
  FullParameters(const FullParameters&) = delete;
  FullParameters& operator=(const FullParameters&) = delete;

 private:
  ParameterResidency* residency_;
};

// Where and how a model computes: the device, the compute dtype (f32, bf16, f16) and, for f32
// on the GPU, whether GEMMs and convolutions may use TF32 tensor cores.
struct ComputeOptions {
  Device device = Device::cpu;
  DType precision = DType::f32;
  bool tf32 = false;
};

// The model's input length for token data: `model.block_size` of a family that has one; 0
// otherwise.
std::int64_t model_block_size(Config& model_config);
// The safetensors file a new run's parameters come from (`model.init_from` of a GPT; read with
// import_gpt_safetensors); "" for the random initialisation.
std::string model_init_from(Config& model_config);

// Builds the layers described by [[model.layers]] (type = "linear" | "conv2d" | "relu" |
// "maxpool2d" | "flatten" | "dropout" | "batchnorm2d") for a per-sample input shape, with
// the CPU or the CUDA layers, and sets the compute dtype.
// data_vocab_size: the token data's vocabulary (0 for image data), a language model's default.
std::unique_ptr<Model> build_model(Config& model_config, const Shape& input_shape, const ComputeOptions& compute = {},
                                   std::int64_t data_vocab_size = 0);

}  // namespace ringtrain
