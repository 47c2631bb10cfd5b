// Incremental decoding (Layer::start_decoding, the KV cache) against full forwards: a small
// random GPT decoding token by token, or a prompt at once then token by token, gives the
// last-position logits of full forwards over the growing prefix; attention's decode path
// gives its full path's rows; positions beyond the cache or block_size are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/layers.hpp"
#include "ringtrain/nn/model.hpp"

namespace ringtrain {
namespace {

constexpr std::int64_t kBlock = 9, kVocab = 13;
constexpr double kRel = 1e-5;

std::unique_ptr<Model> gpt(std::int64_t t, const Model* params_from = nullptr) {
  Config c = Config::parse(
      "[model]\nfamily = \"gpt\"\nn_layer = 2\nn_head = 2\nn_embd = 16\nblock_size = 9\nvocab_size = 13\n"
      "dropout = 0.1\n",
      "test.toml");
  Config m = c.section("model");
  auto model = build_model(m, Shape{t});
  if (params_from == nullptr)
    model->init_params(7);
  else
    std::memcpy(model->params().f32(), params_from->params().f32(), params_from->params().nbytes());
  return model;
}

std::vector<std::int32_t> random_tokens(std::int64_t n, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::int32_t> out(static_cast<std::size_t>(n));
  for (auto& t : out) t = static_cast<std::int32_t>(rng.below(kVocab));
  return out;
}

Tensor token_tensor(const std::vector<std::int32_t>& tokens, const Shape& shape) {
  Tensor x = Tensor::empty(shape, DType::i32);
  std::copy(tokens.begin(), tokens.end(), x.data<std::int32_t>());
  return x;
}

StepInfo eval_at(std::int64_t position) {
  StepInfo info;
  info.training = false;
  info.position = position;
  return info;
}

// The last-position logits of a full forward over tokens[0, len) (a model configured for T = len).
std::vector<float> full_logits(const Model& trained, const std::vector<std::int32_t>& tokens, std::int64_t len) {
  auto full = gpt(len, &trained);
  const std::vector<std::int32_t> prefix(tokens.begin(), tokens.begin() + len);
  const Tensor& y = full->forward(token_tensor(prefix, Shape{1, len}), eval_at(0));
  return {y.f32() + (len - 1) * kVocab, y.f32() + len * kVocab};
}

void expect_close(const float* got, const std::vector<float>& want, const std::string& what) {
  float scale = 0.0f;
  for (const float v : want) scale = std::max(scale, std::fabs(v));
  ASSERT_GT(scale, 0.0f);
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], kRel * scale) << what << " logit " << i;
}

TEST(Decoding, TokenByTokenMatchesFullForwards) {
  auto trained = gpt(kBlock);
  auto decoder = gpt(1, trained.get());
  decoder->start_decoding(kBlock);
  const auto tokens = random_tokens(kBlock, 3);
  for (std::int64_t p = 0; p < kBlock; ++p) {
    const Tensor& y = decoder->forward(token_tensor({tokens[static_cast<std::size_t>(p)]}, Shape{1, 1}), eval_at(p));
    ASSERT_EQ(y.numel(), kVocab);
    expect_close(y.f32(), full_logits(*trained, tokens, p + 1), "position " + std::to_string(p));
  }
}

// A prompt in one forward (its rows consecutive positions), then single tokens; then the
// window slid: the cache refilled from position 0 with other tokens overwrites the old rows.
TEST(Decoding, PrefillThenTokensAndRefill) {
  auto trained = gpt(kBlock);
  auto decoder = gpt(1, trained.get());
  decoder->start_decoding(kBlock);
  for (const std::uint64_t seed : {5, 6}) {
    const auto tokens = random_tokens(kBlock, seed);
    constexpr std::int64_t kPrompt = 4;
    const std::vector<std::int32_t> prompt(tokens.begin(), tokens.begin() + kPrompt);
    const Tensor& y = decoder->forward(token_tensor(prompt, Shape{kPrompt, 1}), eval_at(0));
    ASSERT_EQ(y.numel(), kPrompt * kVocab);
    for (std::int64_t p = 0; p < kPrompt; ++p)
      expect_close(y.f32() + p * kVocab, full_logits(*trained, tokens, p + 1), "prompt row " + std::to_string(p));
    for (std::int64_t p = kPrompt; p < kBlock; ++p) {
      const Tensor& z = decoder->forward(token_tensor({tokens[static_cast<std::size_t>(p)]}, Shape{1, 1}), eval_at(p));
      expect_close(z.f32(), full_logits(*trained, tokens, p + 1), "position " + std::to_string(p));
    }
  }
}

TEST(Decoding, AttentionDecodeMatchesFullPath) {
  constexpr std::int64_t kT = 7, kC = 12, kHeads = 3;
  Rng rng(11);
  Tensor x = Tensor::empty(Shape{1, kT, 3 * kC});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 2.0f * rng.uniform() - 1.0f;
  CausalSelfAttention full(kHeads);
  full.configure(Shape{kT, 3 * kC});
  Tensor want = Tensor::empty(Shape{1, kT, kC});
  full.forward(x, want, StepInfo{});

  CausalSelfAttention step(kHeads);
  step.configure(Shape{1, 3 * kC});
  step.start_decoding(kT);
  Tensor got = Tensor::empty(Shape{kT, 1, kC});
  // Positions 0..2 in one call, then one at a time.
  std::vector<std::pair<std::int64_t, std::int64_t>> chunks = {{0, 3}};
  for (std::int64_t p = 3; p < kT; ++p) chunks.emplace_back(p, 1);
  for (const auto& [from, count] : chunks) {
    const Tensor in = x.reshape(Shape{kT, 1, 3 * kC}).rows(from, count);
    Tensor out = got.rows(from, count);
    step.forward(in, out, eval_at(from));
  }
  const std::vector<float> ref(want.f32(), want.f32() + want.numel());
  expect_close(got.f32(), ref, "attention");
}

TEST(Decoding, PositionsBeyondTheCacheAreRefused) {
  auto decoder = gpt(1);
  EXPECT_THROW(decoder->start_decoding(kBlock + 1), ConfigError);
  decoder->start_decoding(4);
  const Tensor x = token_tensor({1, 2}, Shape{2, 1});
  EXPECT_NO_THROW(decoder->forward(x, eval_at(2)));
  EXPECT_THROW(decoder->forward(x, eval_at(3)), Error);
}

}  // namespace
}  // namespace ringtrain
