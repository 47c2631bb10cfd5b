// Token sampling (greedy, seeded draws, top-k, frequencies against the softmax) and the
// Generator on a small random GPT: the KV cache gives the same tokens as full forwards, also
// once the sequence outgrows block_size and for a prompt longer than it; a seed fixes the text;
// bad prompts and options are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/generator.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/nn/sampling.hpp"

namespace ringtrain {
namespace {

TEST(Sampling, GreedyIsTheArgMaxLowestIdOnTies) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  for (std::int64_t p = 0; p < 10; ++p) EXPECT_EQ(sample_token(logits.data(), 4, {0.0, 0, 3}, p), 1);
  for (std::int64_t p = 0; p < 10; ++p) EXPECT_EQ(sample_token(logits.data(), 4, {5.0, 1, 3}, p), 1);  // top-1
}

TEST(Sampling, FrequenciesFollowTheTemperedSoftmaxWithinTopK) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -0.5f, 1.5f};
  constexpr int kDraws = 40000;
  for (const auto& [temperature, top_k] : std::vector<std::pair<double, std::int64_t>>{{1.0, 0}, {0.5, 3}}) {
    std::vector<double> want(logits.size(), 0.0);
    std::vector<std::size_t> order = {2, 4, 0, 1, 3};  // by logit, largest first
    double total = 0.0;
    for (std::size_t j = 0; j < order.size(); ++j) {
      if (top_k > 0 && static_cast<std::int64_t>(j) >= top_k) break;
      want[order[j]] = std::exp(logits[order[j]] / temperature);
      total += want[order[j]];
    }
    std::vector<int> count(logits.size(), 0);
    for (int d = 0; d < kDraws; ++d)
      ++count[static_cast<std::size_t>(sample_token(logits.data(), 5, {temperature, top_k, 9}, d))];
    for (std::size_t i = 0; i < logits.size(); ++i)
      EXPECT_NEAR(count[i] / static_cast<double>(kDraws), want[i] / total, 0.01)
          << "token " << i << " at temperature " << temperature << ", top_k " << top_k;
  }
}

TEST(Sampling, SeedAndPositionFixTheDraw) {
  const std::vector<float> logits(50, 0.0f);
  std::vector<std::int32_t> a, b, c;
  for (std::int64_t p = 0; p < 40; ++p) {
    a.push_back(sample_token(logits.data(), 50, {1.0, 0, 1}, p));
    b.push_back(sample_token(logits.data(), 50, {1.0, 0, 1}, p));
    c.push_back(sample_token(logits.data(), 50, {1.0, 0, 2}, p));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Sampling, BadOptionsAreRefused) {
  const std::vector<float> logits = {0.0f, 1.0f};
  EXPECT_THROW(sample_token(logits.data(), 2, {-1.0, 0, 0}, 0), ConfigError);
  EXPECT_THROW(sample_token(logits.data(), 2, {NAN, 0, 0}, 0), ConfigError);
  EXPECT_THROW(sample_token(logits.data(), 2, {1.0, -1, 0}, 0), ConfigError);
}

constexpr std::int64_t kVocab = 11;

// A random GPT with block_size 8, its parameters scaled up so that its next-token distributions
// are peaked (a wrong context changes the tokens, not just the logits' last digits).
Generator generator(bool kv_cache) {
  Config c = Config::parse(
      "[model]\nfamily = \"gpt\"\nn_layer = 2\nn_head = 2\nn_embd = 16\nblock_size = 8\nvocab_size = 11\n",
      "test.toml");
  Config m = c.section("model");
  auto model = build_model(m, Shape{8});
  model->init_params(5);
  Generator g(m, kv_cache);
  Tensor& p = g.params();
  EXPECT_EQ(p.numel(), model->arena_elements());
  for (std::int64_t i = 0; i < p.numel(); ++i) p.f32()[i] = 6.0f * model->params().f32()[i];
  return g;
}

TEST(Generator, KvCacheGivesTheFullForwardsTokens) {
  Generator cached = generator(true), full = generator(false);
  ASSERT_EQ(cached.vocab_size(), kVocab);
  ASSERT_EQ(cached.block_size(), 8);
  // 3 + 20 tokens outgrow block_size; a prompt of 12 starts beyond it.
  for (const std::vector<std::int32_t>& prompt :
       {std::vector<std::int32_t>{1, 2, 3}, std::vector<std::int32_t>{4, 0, 9, 9, 2, 7, 1, 1, 3, 10, 5, 6}}) {
    for (const double temperature : {0.0, 1.0}) {
      const SamplingOptions o{temperature, 0, 42};
      const auto want = full.generate(prompt, 20, o);
      ASSERT_EQ(want.size(), 20u);
      EXPECT_EQ(cached.generate(prompt, 20, o), want) << "temperature " << temperature;
      std::vector<std::int32_t> seen;
      EXPECT_EQ(cached.generate(prompt, 20, o, [&](std::int32_t t) { seen.push_back(t); }), want);
      EXPECT_EQ(seen, want);
    }
  }
}

TEST(Generator, SeedFixesTheText) {
  Generator g = generator(true);
  const std::vector<std::int32_t> prompt = {3, 1, 4};
  const auto a = g.generate(prompt, 30, {1.0, 5, 1});
  EXPECT_EQ(g.generate(prompt, 30, {1.0, 5, 1}), a);
  EXPECT_NE(g.generate(prompt, 30, {1.0, 5, 2}), a);
}

TEST(Generator, UsesParametersChangedBetweenCalls) {
  Generator g = generator(true);
  const std::vector<std::int32_t> prompt = {3, 1, 4};
  const auto before = g.generate(prompt, 20, {0.0, 0, 0});
  Tensor& p = g.params();
  for (std::int64_t i = 0; i < p.numel(); ++i) p.f32()[i] = -p.f32()[i];
  EXPECT_NE(g.generate(prompt, 20, {0.0, 0, 0}), before);
}

TEST(Generator, BadInputIsRefused) {
  Generator g = generator(true);
  EXPECT_THROW(g.generate({}, 5, {}), DataError);
  EXPECT_THROW(g.generate({1, static_cast<std::int32_t>(kVocab)}, 5, {}), DataError);
  EXPECT_THROW(g.generate({1, -1}, 5, {}), DataError);
  Config c = Config::parse("[model]\n[[model.layers]]\ntype = \"linear\"\nout = 3\n", "test.toml");
  EXPECT_THROW(Generator(c.section("model"), true), ConfigError);
}

}  // namespace
}  // namespace ringtrain
