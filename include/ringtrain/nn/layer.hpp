// Layer: the interface every network layer implements. A layer is configured once with its
// per-sample input shape, owns no parameter memory (it gets views into the model's flat
// arenas), and reuses its scratch buffers across steps (no allocation in the hot loop).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

// How a parameter is initialised (PyTorch's defaults, so results are comparable).
enum class ParamInit {
  uniform_fan_in,  // U(-1/sqrt(fan_in), 1/sqrt(fan_in))
  ones,
  zeros,
  normal,  // N(0, ParamSpec::std^2) (GPT-2's initialisation)
};

struct ParamSpec {
  std::string name;  // "weight", "bias"
  Shape shape;
  ParamInit init = ParamInit::uniform_fan_in;
  std::int64_t fan_in = 1;
  double std = 0.02;  // ParamInit::normal only
};

// What a forward pass needs to know beyond its input.
struct StepInfo {
  bool training = true;
  std::uint64_t seed = 0;        // run seed
  std::int64_t step = 0;         // global step (dropout masks differ per step)
  int rank = 0;                  // dropout masks differ per rank
  std::int64_t micro_batch = 0;  // with gradient accumulation: which micro-batch of the step
  // Decoding (after Layer::start_decoding): the sequence position of the batch's first row.
  std::int64_t position = 0;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string_view kind() const = 0;

  // Called once, with the per-sample input shape; returns the per-sample output shape.
  // Throws ConfigError when the input does not fit the layer.
  virtual Shape configure(const Shape& input) = 0;
  // The dtype of the input this layer reads: f32 (the model's activation dtype) or i32 (token
  // ids, read by an embedding; only from the model's input).
  virtual DType input_dtype() const { return DType::f32; }
  virtual std::vector<ParamSpec> param_specs() const { return {}; }
  // Views into the flat parameter/gradient arenas, in param_specs() order.
  virtual void bind(const std::vector<Tensor>& /*params*/, const std::vector<Tensor>& /*grads*/) {}
  // A GPU model computing in bf16/f16: views of its compute copy of the parameters (that dtype),
  // in param_specs() order, after bind; the model keeps them current (Model::compute_copy). A
  // layer reading parameters in the compute dtype uses them instead of casting its own.
  virtual void bind_compute(const std::vector<Tensor>& /*compute*/) {}
  // Row blocks of a 2-D parameter's gradient ([rows, width]; a tied token table, which GPT-2's
  // embedding and LM head share). A layer that can compute rows [r0, r1) of parameter `param`'s
  // gradient on their own, from what its last backward saw, says so; after defer_param_grad it
  // leaves that gradient out of backward and the model asks for it block by block, one gradient
  // bucket at a time (ZeRO then never holds the whole gradient, and tied users need no scratch).
  virtual bool param_grad_rows_supported(std::size_t /*param*/) const { return false; }
  virtual void defer_param_grad(std::size_t /*param*/) {}
  // Rows [r0, r1) of the deferred gradient into `out` (row-major, the parameter's width): written,
  // or added to what `out` holds.
  virtual void param_grad_rows(std::size_t /*param*/, std::int64_t /*r0*/, std::int64_t /*r1*/, float* /*out*/,
                               bool /*add*/) const {}
  // Non-parameter state kept in sync across ranks before evaluation (BatchNorm statistics).
  virtual std::vector<Tensor> buffers() { return {}; }

  // x: [N, ...input], y: [N, ...output], both preallocated by the model.
  virtual void forward(const Tensor& x, Tensor& y, const StepInfo& info) = 0;
  // Overwrites the parameter gradients; writes dx unless dx is null (the network input
  // needs no gradient).
  virtual void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) = 0;

  // Layers reading several values (a residual addition) override the *_many forms and
  // num_inputs(); the model calls only these, which forward to the one-input forms by default.
  virtual std::size_t num_inputs() const { return 1; }
  virtual Shape configure_many(const std::vector<Shape>& inputs) { return configure(inputs.front()); }
  virtual void forward_many(const std::vector<const Tensor*>& x, Tensor& y, const StepInfo& info) {
    forward(*x.front(), y, info);
  }
  // dx[k] is null when input k needs no gradient.
  virtual void backward_many(const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                             const std::vector<Tensor*>& dx) {
    backward(*x.front(), y, dy, dx.front());
  }

  // Asked once at model build when this layer reads one value, the output of `producer`, a
  // one-input layer without parameters whose output nothing else reads: true when this layer
  // takes over producer's work, applying it to its own input in forward and backward, bitwise as
  // the two layers do apart. The model then skips producer and hands this layer producer's input
  // (and that input's gradient); saves the passes over producer's output (ReLU into max-pool).
  virtual bool absorb_producer(const Layer& /*producer*/) { return false; }
  // The converse, asked once at model build when this layer's output is read only by `consumer`,
  // a one-input layer without parameters whose output has the same shape and is not the model's
  // output: true when this layer takes over consumer's work, its forward writing consumer's output
  // and its backward taking that output's gradient, bitwise as the two layers do apart (on the
  // CPU; a CUDA Linear's GELU in cuBLASLt's epilogue starts from the unrounded product, so in bf16
  // it agrees only to rounding). The model then skips consumer and hands consumer's readers this
  // layer's output (a ReLU in a Linear's GEMM epilogue, or in a batch norm's or an add's output
  // pass: no pass and no buffer of the ReLU's). Its backward may then overwrite dy: the model
  // reads that gradient no more.
  virtual bool absorb_consumer(const Layer& /*consumer*/) { return false; }
  // Asked once at model build, after the absorbing above, for each value that this layer alone
  // reads (once), that `producer` computes and whose gradient the model needs: true when this
  // layer's backward, as it writes that value's gradient, also applies the gradient rule of the
  // activation the producer absorbed (absorb_consumer), so that the producer's backward need not
  // (a ReLU's, in the epilogue of the next Linear's input-gradient GEMM on the GPU). This layer
  // tells the producer so itself; the model only asks.
  virtual bool fuse_producer_gradient(Layer& /*producer*/) { return false; }

  // The fewest samples a training forward of this layer can take: 2 for a batch norm over 1 x 1
  // planes (one value per channel has no batch statistics), else 1.
  virtual std::int64_t min_training_batch() const { return 1; }

  // True when, in a training pass (or not), this one-input layer's output is its input unchanged,
  // only reshaped (Flatten; Dropout when not training or p == 0). The model then calls neither
  // forward nor backward: readers get a view of the input, and a layer that passes through in
  // training too gets no output buffer and hands its output's gradient on as its input's.
  virtual bool passes_through(bool /*training*/) const { return false; }

  // Called before each training step's forward, outside any captured CUDA graph: a layer whose
  // work depends on StepInfo::step (a dropout mask) puts that step's state in device memory
  // here, so a graph replay of its forward uses it.
  virtual void begin_step(const StepInfo& /*info*/) {}

  // Switches the layer to decoding one sequence incrementally (inference only, for text
  // generation): from then on the rows of forward's batch, all samples' positions in order, are
  // the consecutive positions StepInfo::position, position + 1, ... of one sequence, and a layer
  // that mixes positions (attention) attends over everything forwarded at earlier positions, kept
  // in a cache of max_positions rows. Forwarding at position p again overwrites from p on.
  // Position-wise layers need nothing; training never calls this, so it costs training nothing.
  virtual void start_decoding(std::int64_t /*max_positions*/) {}

  // Floating-point operations of one forward pass for one sample (2 per multiply-add).
  virtual std::int64_t forward_flops_per_sample() const { return 0; }
};

}  // namespace ringtrain
