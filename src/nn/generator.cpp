// Generator (see header). The KV cache holds the window's tokens from sequence[cache_from_] on,
// at positions 0, 1, ...: while the window only grows, each step forwards just the new tokens at
// the next positions; when it slides (or a new prompt comes) the whole window is forwarded from
// position 0, overwriting the cache. Without the cache the model is configured for the longest
// window this call needs and the context sits at its start, padded with token 0: the padding
// comes later in the sequence, so causal attention keeps it out of the logits read.
#include "ringtrain/nn/generator.hpp"

#include <algorithm>
#include <cstring>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/model.hpp"

namespace ringtrain {

Generator::Generator(Config model_config, bool kv_cache) : config_(std::move(model_config)), kv_cache_(kv_cache) {
  block_ = model_block_size(config_);
  RT_REQUIRE(block_ > 0, ConfigError,
             "generate: the model is not a GPT (generation needs model.family = \"gpt\", whose block_size bounds "
             "the context)");
  build(1);
  params_ = Tensor::empty(model_->params().shape());
  vocab_ = model_->output_shape().dims().back();
}

Generator::Generator(Generator&&) noexcept = default;
Generator::~Generator() = default;

const ParamLayout& Generator::param_layout() const { return model_->param_layout(); }

void Generator::build(std::int64_t length) {
  model_.reset();
  model_ = build_model(config_, Shape{length});
  if (kv_cache_) model_->start_decoding(block_);
  params_changed_ = true;
}

Model& Generator::model_of_length(std::int64_t length) {
  if (model_->input_shape()[0] != length) build(length);
  if (params_changed_) {
    std::memcpy(model_->params().f32(), params_.f32(), params_.nbytes());
    params_changed_ = false;
  }
  return *model_;
}

std::vector<std::int32_t> Generator::generate(const std::vector<std::int32_t>& prompt, std::int64_t max_tokens,
                                              const SamplingOptions& sampling,
                                              const std::function<void(std::int32_t)>& on_token) {
  RT_REQUIRE(!prompt.empty(), DataError, "generate: the prompt is empty (generation starts from at least one token)");
  RT_REQUIRE(max_tokens >= 0, ConfigError, "generate: max_tokens must be >= 0, got {}", max_tokens);
  check_sampling_options(sampling);
  for (std::size_t i = 0; i < prompt.size(); ++i)
    RT_REQUIRE(prompt[i] >= 0 && prompt[i] < vocab_, DataError,
               "generate: prompt token {} is {}, outside the model's vocabulary [0, {})", i, prompt[i], vocab_);
  model_of_length(kv_cache_ ? 1 : std::min(block_, std::ssize(prompt) + max_tokens));
  cached_ = 0;
  std::vector<std::int32_t> sequence = prompt, out;
  for (std::int64_t i = 0; i < max_tokens; ++i) {
    const std::int32_t token = sample_token(next_logits(sequence), vocab_, sampling, std::ssize(sequence));
    sequence.push_back(token);
    out.push_back(token);
    if (on_token) on_token(token);
  }
  return out;
}

const float* Generator::next_logits(const std::vector<std::int32_t>& sequence) {
  StepInfo info;
  info.training = false;
  const std::int64_t n = std::ssize(sequence);
  if (!kv_cache_) {
    const std::int64_t length = model_->input_shape()[0], window = std::min(n, length);
    Tensor x = Tensor::empty(Shape{1, length}, DType::i32);
    std::copy(sequence.end() - window, sequence.end(), x.data<std::int32_t>());
    return model_->forward(x, info).f32() + (window - 1) * vocab_;
  }
  const std::int64_t from = std::max<std::int64_t>(0, n - block_);
  if (cached_ == 0 || cache_from_ != from) {  // a new prompt, or the window slid: refill
    cache_from_ = from;
    cached_ = 0;
  }
  const std::int64_t fresh = n - from - cached_;
  Tensor x = Tensor::empty(Shape{fresh, 1}, DType::i32);
  std::copy(sequence.end() - fresh, sequence.end(), x.data<std::int32_t>());
  info.position = cached_;
  const Tensor& logits = model_->forward(x, info);
  cached_ += fresh;
  return logits.f32() + (fresh - 1) * vocab_;
}

}  // namespace ringtrain
