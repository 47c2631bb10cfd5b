// Generator: continues a prompt of token ids with a trained GPT-style model (model.family =
// "gpt"), one sampled token at a time. With the KV cache a copy of the model configured for one
// position decodes incrementally (Model::start_decoding): the prompt in one forward, then one
// position per token. Without it each token is a full forward over the context (the reference
// the cache is checked against). The context is the last block_size tokens: once the sequence
// outgrows it the window slides by one token per step (as nanoGPT crops), and the KV cache is
// refilled from the whole window each step, so both ways see the same context and, for a seed,
// give the same tokens (barring float rounding deciding a near-tie).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ringtrain/core/config.hpp"
#include "ringtrain/nn/sampling.hpp"
#include "ringtrain/tensor/param_layout.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

class Model;

class Generator {
 public:
  // model_config: the [model] section of the trained run (model.family = "gpt"; ConfigError
  // otherwise). kv_cache = false: every token is a full forward of a model as long as the window.
  Generator(Config model_config, bool kv_cache);
  Generator(Generator&&) noexcept;
  ~Generator();

  std::int64_t vocab_size() const { return vocab_; }
  std::int64_t block_size() const { return block_; }
  // The f32 parameter arena (host, zeros at first) generate() runs the model with, laid out by
  // param_layout(): fill it with the trained parameters (read_checkpoint_params). Non-const
  // access counts as a change.
  const ParamLayout& param_layout() const;
  Tensor& params() {
    params_changed_ = true;
    return params_;
  }

  // The max_tokens tokens that follow `prompt` (ids in [0, vocab_size); DataError otherwise);
  // on_token, when given, sees each one as soon as it is drawn.
  std::vector<std::int32_t> generate(const std::vector<std::int32_t>& prompt, std::int64_t max_tokens,
                                     const SamplingOptions& sampling,
                                     const std::function<void(std::int32_t)>& on_token = {});

 private:
  // Makes model_ the model for per-sample input [length] (decoding with the KV cache).
  void build(std::int64_t length);
  // model_ for per-sample input [length] with params_ (rebuilt when the length changes, its
  // parameters refreshed when params_ may have changed).
  Model& model_of_length(std::int64_t length);
  // Logits [vocab] for the token after the sequence's last one, from the last block_size tokens.
  const float* next_logits(const std::vector<std::int32_t>& sequence);

  Config config_;
  Tensor params_;
  bool params_changed_ = true;
  bool kv_cache_;
  std::int64_t block_ = 0, vocab_ = 0;
  std::unique_ptr<Model> model_;
  // KV cache: it holds sequence[cache_from_, cache_from_ + cached_) at positions 0, 1, ...
  std::int64_t cache_from_ = 0, cached_ = 0;
};

}  // namespace ringtrain
