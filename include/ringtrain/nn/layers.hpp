// The built-in layers (CPU backend). Each has a finite-difference gradient test in
// tests/unit/nn. Layouts are NCHW; convolution is im2col + one GEMM over the whole batch.
// Geometry and parameters are protected: the CUDA layers (src/nn/cuda) derive from these
// classes and replace only forward/backward, so both backends share shapes and parameters.
#pragma once
#include <cstdint>
#include <vector>

#include "ringtrain/nn/layer.hpp"

namespace ringtrain {

// Applied to the last dimension: per sample [in] -> [out], or [T, in] -> [T, out] (a sequence,
// as GEMMs over N*T rows).
class Linear : public Layer {
 public:
  // init_std > 0: weights N(0, init_std^2) and zero bias (GPT-2); else PyTorch's uniform default.
  Linear(std::int64_t out_features, bool bias, double init_std = 0.0);
  std::string_view kind() const override { return "linear"; }
  Shape configure(const Shape& input) override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;
  std::int64_t forward_flops_per_sample() const override { return 2 * seq_ * in_ * out_; }
  // The weight's (param 0): rows of dW = dy^T x are output features.
  bool param_grad_rows_supported(std::size_t param) const override { return param == 0; }
  void defer_param_grad(std::size_t param) override;
  void param_grad_rows(std::size_t param, std::int64_t r0, std::int64_t r1, float* out, bool add) const override;
  // A ReLU after it: applied to the output in place, and its gradient rule to dy in backward.
  bool absorb_consumer(const Layer& consumer) override;

 protected:
  // Rows of the GEMMs for a batch x: N for [N, in], N*T for [N, T, in].
  std::int64_t rows_of(const Tensor& x) const { return x.shape()[0] * seq_; }

  std::int64_t in_ = 0, out_;
  std::int64_t seq_ = 1;  // T for a per-sample input [T, in]; 1 for [in]
  bool has_bias_;
  double init_std_;
  Tensor w_, b_, dw_, db_;
  bool defer_dw_ = false;  // backward leaves dW to param_grad_rows, keeping x and dy for it
  Tensor saved_x_, saved_dy_;
  bool relu_after_ = false;  // absorbed the ReLU reading its output (absorb_consumer)
};

struct Conv2dOptions {
  std::int64_t out_channels = 0;
  std::int64_t kernel = 3;
  std::int64_t stride = 1;
  std::int64_t padding = 0;
  bool bias = true;
};

class Conv2d : public Layer {
 public:
  explicit Conv2d(const Conv2dOptions& options);
  std::string_view kind() const override { return "conv2d"; }
  Shape configure(const Shape& input) override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;
  std::int64_t forward_flops_per_sample() const override;

 protected:
  struct Span {
    std::int64_t begin, end;
  };
  Span valid_span(std::int64_t kj) const;
  void im2col(const float* image, float* cols);        // one sample: [C*k*k, OH*OW]
  void col2im(const float* cols, float* image) const;  // one sample, overwrites image

  Conv2dOptions o_;
  std::int64_t c_ = 0, h_ = 0, w_in_ = 0, oh_ = 0, ow_ = 0;
  Tensor w_, b_, dw_, db_;
  std::vector<float> cols_;        // columns of the last forward input: [N][C*k*k][OH*OW]
  std::vector<float> dcols_;       // one sample's column gradient
  std::vector<float> padded_;      // stride 1: one input plane with its zero border
  std::vector<double> bias_sums_;  // per-channel bias gradient accumulators
};

class ReLU : public Layer {
 public:
  std::string_view kind() const override { return "relu"; }
  Shape configure(const Shape& input) override { return input; }
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;
  // The rule, also for layers that absorb a ReLU (in place is fine): y = x > 0 ? x : 0 (NaN and
  // -0 give +0), and dx = y > 0 ? dy : 0; on the calling thread (a piece of a parallel loop).
  static void apply(const float* x, float* y, std::int64_t n);
  static void apply_backward(const float* y, const float* dy, float* dx, std::int64_t n);
  // The same over a whole tensor, on the rank's compute threads.
  static void apply_on_threads(const float* x, float* y, std::int64_t n);
  static void apply_backward_on_threads(const float* y, const float* dy, float* dx, std::int64_t n);
  // Whether `layer` is this CPU ReLU, the one a CPU layer may absorb (a device layer has its own).
  static bool is_cpu_relu(const Layer& layer);
};

class MaxPool2d : public Layer {
 public:
  MaxPool2d(std::int64_t kernel, std::int64_t stride);
  std::string_view kind() const override { return "maxpool2d"; }
  Shape configure(const Shape& input) override;
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;
  // A ReLU before it: pools the values before the ReLU and applies it to the pooled ones (ReLU
  // is monotone, so the maxima are the same, and a window whose maximum is not positive passes
  // no gradient either way).
  bool absorb_producer(const Layer& producer) override;

 protected:
  std::int64_t k_, s_, c_ = 0, h_ = 0, w_ = 0, oh_ = 0, ow_ = 0;
  std::vector<std::int32_t> argmax_;  // input offset (within the sample) of each output
  bool relu_first_ = false;           // absorbed a ReLU producer
};

class Flatten : public Layer {
 public:
  std::string_view kind() const override { return "flatten"; }
  Shape configure(const Shape& input) override { return Shape{input.numel()}; }
  bool passes_through(bool /*training*/) const override { return true; }
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;
};

class Dropout : public Layer {
 public:
  Dropout(double p, int layer_index);
  std::string_view kind() const override { return "dropout"; }
  Shape configure(const Shape& input) override { return input; }
  bool passes_through(bool training) const override { return !training || p_ == 0.0f; }
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;

 protected:
  float p_;
  int layer_index_;           // part of the mask's random stream key
  std::vector<float> scale_;  // 0 or 1/(1-p) per element of the last training forward
};

class BatchNorm2d : public Layer {
 public:
  BatchNorm2d(double momentum, double eps);
  std::string_view kind() const override { return "batchnorm2d"; }
  Shape configure(const Shape& input) override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  std::vector<Tensor> buffers() override { return {running_mean_, running_var_}; }
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;
  // A ReLU after it (a ResNet's conv-bn-relu): applied as each output is written, and its
  // gradient rule to dy in backward.
  bool absorb_consumer(const Layer& consumer) override;
  std::int64_t min_training_batch() const override { return hw_ > 1 ? 1 : 2; }

 protected:
  float momentum_, eps_;
  std::int64_t c_ = 0, hw_ = 0;
  Tensor gamma_, beta_, dgamma_, dbeta_;
  Tensor running_mean_, running_var_;
  std::vector<float> mean_, inv_std_;  // batch statistics of the last training forward
  bool relu_after_ = false;            // absorbed the ReLU reading its output (absorb_consumer)
};

// The residual addition of two values of the same shape (model.layers[].inputs names them).
class Add : public Layer {
 public:
  std::string_view kind() const override { return "add"; }
  std::size_t num_inputs() const override { return 2; }
  Shape configure(const Shape& input) override;
  Shape configure_many(const std::vector<Shape>& inputs) override;
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;
  void forward_many(const std::vector<const Tensor*>& x, Tensor& y, const StepInfo& info) override;
  void backward_many(const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                     const std::vector<Tensor*>& dx) override;
  // A ReLU after it (a ResNet block's relu(x + f(x))): applied as the sum is written, and its
  // gradient rule to dy in backward.
  bool absorb_consumer(const Layer& consumer) override;

 protected:
  bool relu_after_ = false;  // absorbed the ReLU reading its output (absorb_consumer)
};

// Token and position embedding of a GPT: per sample [T] int32 token ids -> [T, C] with
// y[t] = weight[token[t]] + position[t]; T <= block_size. Tokens have no gradient. Decoding:
// batch row r is at position StepInfo::position + r.
class Embedding : public Layer {
 public:
  Embedding(std::int64_t vocab_size, std::int64_t block_size, std::int64_t n_embd);
  std::string_view kind() const override { return "embedding"; }
  Shape configure(const Shape& input) override;
  DType input_dtype() const override { return DType::i32; }
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;
  void start_decoding(std::int64_t max_positions) override;
  // The token table's (param 0): its row r gathers the gradients of the positions holding token r.
  bool param_grad_rows_supported(std::size_t param) const override { return param == 0; }
  void defer_param_grad(std::size_t param) override;
  void param_grad_rows(std::size_t param, std::int64_t r0, std::int64_t r1, float* out, bool add) const override;

 protected:
  std::int64_t vocab_, block_, c_, t_ = 0;
  bool decoding_ = false;
  bool defer_wte_ = false;  // backward leaves the token table's gradient to param_grad_rows
  Tensor wte_, wpe_, dwte_, dwpe_;
  Tensor saved_tokens_, saved_dy_;
};

// Layer normalisation over the last dimension C (any per-sample shape): each row is normalised
// to zero mean and unit variance (biased), then scaled by weight and shifted by bias ([C]).
class LayerNorm : public Layer {
 public:
  explicit LayerNorm(double eps);
  std::string_view kind() const override { return "layernorm"; }
  Shape configure(const Shape& input) override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;

 protected:
  float eps_;
  std::int64_t c_ = 0;
  Tensor gamma_, beta_, dgamma_, dbeta_;
  std::vector<float> mean_, rstd_;  // per row of the last forward
};

// GELU, the tanh approximation (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
class Gelu : public Layer {
 public:
  std::string_view kind() const override { return "gelu"; }
  Shape configure(const Shape& input) override { return input; }
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;
};

// Causal multi-head self-attention after a fused QKV projection: per sample [T, 3C] (q | k | v
// along the last dimension, head h in columns h*hs..(h+1)*hs of each) -> [T, C], the heads'
// outputs side by side. Keeps only each row's log-sum-exp for backward (see attention.cpp).
// Decoding: a KV cache of every earlier position's k and v rows (see attention.cpp).
class CausalSelfAttention : public Layer {
 public:
  explicit CausalSelfAttention(std::int64_t n_head);
  std::string_view kind() const override { return "attention"; }
  Shape configure(const Shape& input) override;
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;
  void start_decoding(std::int64_t max_positions) override;
  std::int64_t forward_flops_per_sample() const override;

 protected:
  // forward after start_decoding: the batch's rows are positions from `position` on.
  void decode(const Tensor& x, Tensor& y, std::int64_t position);
  // The cap on the threads training runs its (sample, head) pairs on: none where sgemm may run
  // on several at once (blas::sgemm_in_parallel_loops), else 1.
  static int pair_workers();

  std::int64_t heads_, t_ = 0, c_ = 0, hs_ = 0;
  std::vector<float> lse_;                // [N, heads, T]: log-sum-exp of each scaled score row
  std::vector<float> s_, dp_;             // per worker, [64, T] scratch: scores/probabilities, their gradient
  std::int64_t cache_rows_ = 0;           // decoding: positions the cache holds (0: not decoding)
  std::vector<float> k_cache_, v_cache_;  // decoding: [cache_rows_, C] each, heads side by side
};

// Softmax + cross-entropy over logits [N, K] and integer labels; mean over the batch.
class SoftmaxCrossEntropy {
 public:
  // Returns the mean loss; keeps the probabilities for backward.
  double forward(const Tensor& logits, const std::int32_t* labels);
  // dlogits = (softmax - onehot) / N.
  void backward(Tensor& dlogits) const;
  // Samples whose arg-max logit equals the label (in the last forward).
  std::int64_t correct() const { return correct_; }

 private:
  std::vector<float> probs_;
  std::vector<std::int32_t> labels_;
  std::int64_t n_ = 0, k_ = 0, correct_ = 0;
};

}  // namespace ringtrain
