// Model: a sequence of layers with one flat arena for parameters and one for gradients
// (layers hold views). Flat arenas make the gradient allreduce copy-free, and buckets and
// checkpoint slices are just ranges of them. Activations are preallocated per batch size.
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
  // Configures every layer for the per-sample input shape and lays out the arenas.
  Model(std::vector<std::unique_ptr<Layer>> layers, const Shape& input_shape);

  // Initialises all parameters from one seeded stream (the trainer then broadcasts rank
  // 0's parameters so every rank starts identical whatever the seed handling).
  void init_params(std::uint64_t seed);

  // Runs the network on x [N, ...input]; returns the logits [N, ...output] (owned by the
  // model, valid until the next forward).
  const Tensor& forward(const Tensor& x, const StepInfo& info);
  // Called during backward each time a layer with parameters is done: every gradient from
  // element `ready_from` of the arena to its end is final (layers are laid out in forward
  // order, so readiness grows from the end of the arena towards its start).
  using GradReadyHook = std::function<void(std::int64_t ready_from)>;
  // Back-propagates dlogits (same shape as the last forward's output) into the gradient arena.
  void backward(const Tensor& dlogits, const GradReadyHook& on_ready = {});

  Tensor& params() { return params_; }
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
    std::int64_t offset;    // first arena element
  };
  std::vector<ParamTensor> param_tensors() const;
  std::vector<Tensor> buffers();  // non-parameter state (BatchNorm running statistics)
  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const { return shapes_.back(); }
  // Training FLOPs per sample: forward + backward, counted as 3 x forward (2 per MAC).
  std::int64_t train_flops_per_sample() const;
  std::size_t num_layers() const { return layers_.size(); }
  std::string describe() const;  // one line per layer: kind, output shape, parameters

 private:
  void ensure_batch(std::int64_t n);

  std::vector<std::unique_ptr<Layer>> layers_;
  Shape input_shape_;
  std::vector<Shape> shapes_;              // per-sample output shape of each layer
  std::vector<std::int64_t> layer_params_;  // parameter count per layer
  std::vector<std::int64_t> layer_offset_;  // first arena element of each layer's parameters
  std::size_t first_trainable_ = 0;         // index of the first layer with parameters
  std::vector<std::vector<ParamSpec>> specs_;
  Tensor params_, grads_;
  std::int64_t capacity_ = 0;               // batch size the activation buffers hold
  std::vector<Tensor> act_storage_, grad_storage_;  // per layer output, at capacity_
  std::vector<Tensor> acts_, dacts_;        // views of the current batch size
  Tensor input_;                            // view of the last forward's input
};

// Builds the layers described by [[model.layers]] (type = "linear" | "conv2d" | "relu" |
// "maxpool2d" | "flatten" | "dropout" | "batchnorm2d") for a per-sample input shape.
std::unique_ptr<Model> build_model(Config& model_config, const Shape& input_shape);

}  // namespace ringtrain
