// Embedding: GPT-2's token table plus learned positions. Backward is a serial scatter-add (rows
// in batch order), so the gradient is the same whatever the threading; both tables' gradients
// are zeroed first (overwritten, like every layer's). A tied token table's gradient is left to
// param_grad_rows, row block by row block, in the same order. Token ids are checked in forward.
// Decoding (start_decoding) only changes which position row each batch row adds.
#include <cstring>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain {

Embedding::Embedding(std::int64_t vocab_size, std::int64_t block_size, std::int64_t n_embd)
    : vocab_(vocab_size), block_(block_size), c_(n_embd) {
  RT_REQUIRE(vocab_ > 0 && vocab_ <= std::int64_t{1} << 31, ConfigError,
             "embedding: vocab_size must be in [1, 2^31] (token ids are int32), got {}", vocab_);
  RT_REQUIRE(block_ > 0, ConfigError, "embedding: block_size must be > 0, got {}", block_);
  RT_REQUIRE(c_ > 0, ConfigError, "embedding: n_embd must be > 0, got {}", c_);
}

Shape Embedding::configure(const Shape& input) {
  RT_REQUIRE(input.rank() == 1, ConfigError, "embedding: input per sample must be [T] token ids, got {}", input.str());
  RT_REQUIRE(input[0] >= 1 && input[0] <= block_, ConfigError,
             "embedding: sequence length T = {} must be in [1, block_size = {}]", input[0], block_);
  t_ = input[0];
  return Shape{t_, c_};
}

std::vector<ParamSpec> Embedding::param_specs() const {
  return {{"weight", Shape{vocab_, c_}, ParamInit::normal, 1, 0.02},
          {"position", Shape{block_, c_}, ParamInit::normal, 1, 0.02}};
}

void Embedding::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  wte_ = params[0];
  wpe_ = params[1];
  dwte_ = grads[0];
  dwpe_ = grads[1];
}

void Embedding::defer_param_grad(std::size_t param) {
  RT_REQUIRE(param == 0, Error, "embedding: only the token table's gradient can be deferred");
  defer_wte_ = true;
}

void Embedding::param_grad_rows(std::size_t param, std::int64_t r0, std::int64_t r1, float* out, bool add) const {
  RT_REQUIRE(param == 0 && defer_wte_ && 0 <= r0 && r0 <= r1 && r1 <= vocab_, Error,
             "embedding: token table gradient rows [{}, {}) of {} asked for without a deferred gradient", r0, r1,
             vocab_);
  if (!add) std::memset(out, 0, static_cast<std::size_t>((r1 - r0) * c_) * sizeof(float));
  const std::int64_t rows = saved_tokens_.numel();
  const std::int32_t* tokens = saved_tokens_.data<std::int32_t>();
  const float* g = saved_dy_.f32();
  for (std::int64_t row = 0; row < rows; ++row) {  // positions in batch order, as backward adds them
    const std::int64_t token = tokens[row];
    if (token < r0 || token >= r1) continue;
    const float* gr = g + row * c_;
    float* w = out + (token - r0) * c_;
    for (std::int64_t i = 0; i < c_; ++i) w[i] += gr[i];
  }
}

void Embedding::start_decoding(std::int64_t max_positions) {
  RT_REQUIRE(max_positions >= 1 && max_positions <= block_, ConfigError,
             "embedding: cannot decode {} positions (block_size = {})", max_positions, block_);
  decoding_ = true;
}

void Embedding::forward(const Tensor& x, Tensor& y, const StepInfo& info) {
  const std::int64_t n = x.shape()[0];
  // Decoding: the batch's rows are consecutive positions from info.position on.
  const std::int64_t first = decoding_ ? info.position : 0;
  RT_REQUIRE(!decoding_ || (first >= 0 && first + n * t_ <= block_), Error,
             "embedding: positions [{}, {}) are beyond block_size = {}", first, first + n * t_, block_);
  const std::int32_t* tokens = x.data<std::int32_t>();
  const float* wte = wte_.f32();
  const float* wpe = wpe_.f32();
  float* out = y.f32();
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t t = 0; t < t_; ++t) {
      const std::int64_t row = b * t_ + t;
      const std::int64_t token = tokens[row];
      RT_REQUIRE(token >= 0 && token < vocab_, DataError,
                 "embedding: token id {} (sample {}, position {}) is outside the vocabulary [0, {})", token, b, t,
                 vocab_);
      const float* w = wte + token * c_;
      const float* p = wpe + (decoding_ ? first + row : t) * c_;
      float* o = out + row * c_;
      for (std::int64_t i = 0; i < c_; ++i) o[i] = w[i] + p[i];
    }
}

// dx is never written: token ids have no gradient (the model passes none for its input).
void Embedding::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor*) {
  const std::int64_t n = x.shape()[0];
  const std::int32_t* tokens = x.data<std::int32_t>();
  const float* g = dy.f32();
  float* dwpe = dwpe_.f32();
  std::memset(dwpe, 0, dwpe_.nbytes());
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t t = 0; t < t_; ++t) {
      const float* gr = g + (b * t_ + t) * c_;
      float* p = dwpe + t * c_;
      for (std::int64_t i = 0; i < c_; ++i) p[i] += gr[i];
    }
  if (defer_wte_) {
    saved_tokens_ = x;
    saved_dy_ = dy;
    return;
  }
  float* dwte = dwte_.f32();
  std::memset(dwte, 0, dwte_.nbytes());
  for (std::int64_t row = 0; row < n * t_; ++row) {
    const float* gr = g + row * c_;
    float* w = dwte + static_cast<std::int64_t>(tokens[row]) * c_;
    for (std::int64_t i = 0; i < c_; ++i) w[i] += gr[i];
  }
}

}  // namespace ringtrain
