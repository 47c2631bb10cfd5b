// Model: a sequence of layers with one flat arena for parameters and one for gradients
// (layers hold views). Flat arenas make the gradient allreduce copy-free, and buckets and
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

namespace ringtrain {

class Config;

class Model {
 public:
  // Configures every layer for the per-sample input shape and lays out the arenas on
  // `device` (the layers must compute there: CUDA layers for Device::cuda).
  Model(std::vector<std::unique_ptr<Layer>> layers, const Shape& input_shape, Device device = Device::cpu);

  // Initialises all parameters from one seeded stream (the trainer then broadcasts rank
  // 0's parameters so every rank starts identical whatever the seed handling).
  void init_params(std::uint64_t seed);

  // Runs the network on x [N, ...input] (on the model's device, in activation_dtype());
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

  // The f32 master parameters (optimizer, checkpoints, broadcast, pruning). Any non-const
  // access counts as a change: the compute copy is refreshed at the next forward (so callers
  // must not keep the pointer across a forward to write through it later).
  Tensor& params() {
    compute_stale_ = true;
    return params_;
  }
  const Tensor& params() const { return params_; }
  Tensor& grads() { return grads_; }
  std::int64_t num_params() const { return params_.numel(); }
  // Arena offsets where each layer with parameters starts, ascending (gradient buckets are
  // cut only there).
  std::vector<std::int64_t> param_layer_offsets() const;
  // One entry per parameter tensor, in arena order (pruning selects weights by layer kind).
  struct ParamTensor {
    std::size_t layer;      // index in model.layers
    std::string_view kind;  // the layer's kind: "linear", "conv2d", ...
    std::string name;       // "weight", "bias", ...
    Shape shape;
    std::int64_t offset;  // first arena element
  };
  std::vector<ParamTensor> param_tensors() const;
  std::vector<Tensor> buffers();  // non-parameter state (BatchNorm running statistics)
  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const { return shapes_.back(); }
  // Training FLOPs per sample: forward + backward, counted as 3 x forward (2 per MAC).
  std::int64_t train_flops_per_sample() const;
  std::size_t num_layers() const { return layers_.size(); }
  // Layer::begin_step of every layer: before each training step's forward, outside a CUDA graph.
  void begin_step(const StepInfo& info);
  std::string describe() const;  // one line per layer: kind, output shape, parameters

 private:
  void ensure_batch(std::int64_t n);
  void bind_layers(const Tensor& params);
  // Sets input_ to x itself or (low precision) a rounded copy of it, after refreshing the
  // compute parameters if the master changed.
  void prepare_compute(const Tensor& x);
  // The CPU emulation of a low-precision compute dtype (rounding after every layer).
  bool emulated() const { return device_ == Device::cpu && compute_dtype_ != DType::f32; }

  std::vector<std::unique_ptr<Layer>> layers_;
  Shape input_shape_;
  std::vector<Shape> shapes_;               // per-sample output shape of each layer
  std::vector<std::int64_t> layer_params_;  // parameter count per layer
  std::vector<std::int64_t> layer_offset_;  // first arena element of each layer's parameters
  std::size_t first_trainable_ = 0;         // index of the first layer with parameters
  std::vector<std::vector<ParamSpec>> specs_;
  Tensor params_, grads_;
  Device device_;
  DType compute_dtype_ = DType::f32;
  Tensor compute_params_;                           // not f32: the rounded copy the layers are bound to
  bool compute_stale_ = true;                       // compute_params_ must be refreshed from params_
  Tensor input_storage_;                            // not f32: the rounded input, at capacity_
  std::int64_t capacity_ = 0;                       // batch size the activation buffers hold
  std::vector<Tensor> act_storage_, grad_storage_;  // per layer output, at capacity_
  std::vector<Tensor> acts_, dacts_;                // views of the current batch size
  Tensor input_;                                    // view of the last forward's (rounded) input
};

// Where and how a model computes: the device, the compute dtype (f32, bf16, f16) and, for f32
// on the GPU, whether GEMMs and convolutions may use TF32 tensor cores.
struct ComputeOptions {
  Device device = Device::cpu;
  DType precision = DType::f32;
  bool tf32 = false;
};

// Builds the layers described by [[model.layers]] (type = "linear" | "conv2d" | "relu" |
// "maxpool2d" | "flatten" | "dropout" | "batchnorm2d") for a per-sample input shape, with
// the CPU or the CUDA layers, and sets the compute dtype.
std::unique_ptr<Model> build_model(Config& model_config, const Shape& input_shape, const ComputeOptions& compute = {});

}  // namespace ringtrain
