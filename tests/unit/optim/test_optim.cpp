// Optimizers against hand-computed updates (PyTorch semantics) and the LR schedules'
// shapes; config errors name their key.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/optim/optimizer.hpp"

namespace ringtrain {
namespace {

TEST(Sgd, MomentumAndWeightDecayMatchHandComputation) {
  SgdHyper h;
  h.momentum = 0.9f;
  h.weight_decay = 0.1f;
  Sgd opt(1, h);
  float p = 1.0f;
  const float g = 0.5f;
  opt.step(&p, &g, 1, 0.1f);  // g' = 0.6, v = 0.6, p = 1 - 0.06
  EXPECT_FLOAT_EQ(p, 0.94f);
  opt.step(&p, &g, 1, 0.1f);  // g' = 0.5 + 0.094 = 0.594, v = 0.54 + 0.594 = 1.134
  EXPECT_FLOAT_EQ(p, 0.94f - 0.1134f);
}

TEST(Sgd, Nesterov) {
  SgdHyper h;
  h.momentum = 0.5f;
  h.nesterov = true;
  Sgd opt(1, h);
  float p = 0.0f;
  const float g = 1.0f;
  opt.step(&p, &g, 1, 1.0f);  // v = 1, step = g + mu v = 1.5
  EXPECT_FLOAT_EQ(p, -1.5f);
  opt.step(&p, &g, 1, 1.0f);  // v = 1.5, step = 1 + 0.75
  EXPECT_FLOAT_EQ(p, -3.25f);
}

TEST(AdamW, MatchesReferenceFormula) {
  AdamWHyper h;
  h.weight_decay = 0.01f;
  AdamW opt(2, h);
  float p[2] = {1.0f, -2.0f};
  double ref[2] = {1.0, -2.0}, m[2] = {0, 0}, v[2] = {0, 0};
  for (int t = 1; t <= 5; ++t) {
    const float g[2] = {0.1f * t, -0.3f};
    opt.step(p, g, 2, 1e-2f);
    for (int i = 0; i < 2; ++i) {
      ref[i] -= 1e-2 * 0.01 * ref[i];
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
      ref[i] -= 1e-2 * mh / (std::sqrt(vh) + 1e-8);
      EXPECT_NEAR(p[i], ref[i], 1e-5) << "t=" << t << " i=" << i;
    }
  }
}

// Parameter groups: elements in an exempt range are updated without weight decay, the others
// with it, and AdamW's moments and bias correction are the same for both.
TEST(AdamW, ExemptRangesGetNoWeightDecay) {
  AdamWHyper h;
  h.weight_decay = 0.5f;
  AdamW grouped(6, h), decayed(6, h), plain(6, AdamWHyper{.weight_decay = 0.0f});
  grouped.exempt_from_weight_decay({{1, 2}, {4, 1}});
  float a[6], b[6], c[6];
  for (int i = 0; i < 6; ++i) a[i] = b[i] = c[i] = 1.0f + static_cast<float>(i);
  const float g[6] = {0.1f, -0.2f, 0.3f, 0.05f, -0.4f, 0.2f};
  for (int t = 0; t < 3; ++t) {
    grouped.step(a, g, 6, 1e-2f);
    decayed.step(b, g, 6, 1e-2f);
    plain.step(c, g, 6, 1e-2f);
  }
  for (int i = 0; i < 6; ++i) {
    const bool exempt = i == 1 || i == 2 || i == 4;
    EXPECT_EQ(a[i], exempt ? c[i] : b[i]) << i;
  }
  EXPECT_EQ(grouped.steps_taken(), 3);
  AdamW bad(4, h);
  EXPECT_THROW(bad.exempt_from_weight_decay({{2, 2}, {1, 1}}), Error);  // not sorted
}

// ZeRO shards: optimizers owning complementary ranges of the arena (state packed, exempt
// ranges crossing the shard edges) update each element bitwise as one optimizer of the whole.
TEST(AdamW, ShardsUpdateLikeTheWhole) {
  AdamWHyper h;
  h.weight_decay = 0.5f;
  const std::vector<ArenaRange> no_decay{{1, 3}, {8, 2}};
  const std::vector<ArenaRange> shard_a{{0, 2}, {5, 4}}, shard_b{{2, 3}, {9, 1}};
  AdamW whole(10, h), a(10, h, Device::cpu, shard_a), b(10, h, Device::cpu, shard_b);
  for (Optimizer* o : {static_cast<Optimizer*>(&whole), static_cast<Optimizer*>(&a), static_cast<Optimizer*>(&b)})
    o->exempt_from_weight_decay(no_decay);
  EXPECT_EQ(a.state_elements(), 6);
  EXPECT_EQ(b.state_elements(), 4);
  float ref[10], pa[10], pb[10], g[10];
  for (int i = 0; i < 10; ++i) {
    ref[i] = pa[i] = pb[i] = 0.5f + 0.25f * static_cast<float>(i);
    g[i] = 0.1f * static_cast<float>((i * 7) % 5) - 0.2f;
  }
  for (int t = 0; t < 3; ++t) {
    whole.step(ref, g, 10, 1e-2f, 0.5f);
    a.step(pa, g, 10, 1e-2f, 0.5f);
    b.step(pb, g, 10, 1e-2f, 0.5f);
  }
  auto owns = [](const std::vector<ArenaRange>& shard, int i) {
    for (const ArenaRange& r : shard)
      if (i >= r.offset && i < r.end()) return true;
    return false;
  };
  for (int i = 0; i < 10; ++i) {
    const float init = 0.5f + 0.25f * static_cast<float>(i);
    EXPECT_EQ(owns(shard_a, i) ? pa[i] : pb[i], ref[i]) << i;
    EXPECT_EQ(owns(shard_a, i) ? pb[i] : pa[i], init) << i;  // elements a shard does not own stay as they were
  }
  EXPECT_THROW(AdamW(10, h, Device::cpu, {{4, 2}, {1, 1}}), Error);  // not sorted
  EXPECT_THROW(AdamW(10, h, Device::cpu, {{8, 3}}), Error);          // past the arena
}

TEST(ForEachOwned, WalksTheIntersectionWithPackedOffsets) {
  std::vector<std::array<std::int64_t, 3>> runs;
  for_each_owned({{0, 3}, {5, 10}}, {{2, 4}, {12, 5}}, [&](std::int64_t at, std::int64_t packed, std::int64_t n) {
    runs.push_back({at, packed, n});
  });
  const std::vector<std::array<std::int64_t, 3>> expected{{2, 0, 1}, {5, 3, 1}, {12, 4, 3}};
  EXPECT_EQ(runs, expected);
}

TEST(BuildOptimizer, NoDecayAndClipKeys) {
  Config lm_file = Config::parse("[optim]\nname = \"adamw\"\nclip_grad_norm = 1.0\n", "o.toml");
  Config lm = lm_file.section("optim");
  const OptimSetup a = build_optimizer(lm, 4, 10, Device::cpu, true);
  EXPECT_EQ(a.no_decay, (std::vector<std::string>{"bias", "norm", "position"}));
  EXPECT_EQ(a.clip_grad_norm, 1.0);
  Config image_file = Config::parse("[optim]\nname = \"adamw\"\n", "o.toml");
  Config image = image_file.section("optim");
  EXPECT_TRUE(build_optimizer(image, 4, 10).no_decay.empty());
  Config bad_file = Config::parse("[optim]\nno_decay = [\"bias\", \"weights\"]\n", "o.toml");
  Config bad = bad_file.section("optim");
  try {
    build_optimizer(bad, 4, 10);
    ADD_FAILURE() << "accepted \"weights\"";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("\"weights\" is not one of"), std::string::npos) << e.what();
  }
}

TEST(LrSchedule, ConstantStepCosineWarmup) {
  LrSchedule::Options o;
  o.base_lr = 1.0;
  EXPECT_DOUBLE_EQ(LrSchedule(o).at(1000), 1.0);
  o.kind = LrSchedule::Kind::step;
  o.step_size = 10;
  o.gamma = 0.5;
  EXPECT_DOUBLE_EQ(LrSchedule(o).at(9), 1.0);
  EXPECT_DOUBLE_EQ(LrSchedule(o).at(10), 0.5);
  EXPECT_DOUBLE_EQ(LrSchedule(o).at(25), 0.25);
  o.kind = LrSchedule::Kind::cosine;
  o.warmup_steps = 10;
  o.total_steps = 111;  // steps 0..110
  o.min_lr = 0.1;
  const LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);  // warmup: (step + 1) / warmup
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);     // cosine starts at base
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // halfway: (base + min) / 2
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);  // the run's last step is at the floor (it was one step short)
  EXPECT_GT(s.at(109), 0.1 + 1e-6);
}

TEST(BuildOptimizer, ReadsKeysAndRejectsForeignOnes) {
  Config c = Config::parse("[optim]\nname = \"sgd\"\nlr = 0.05\nmomentum = 0.9\nbeta1 = 0.9\n", "o.toml");
  Config o = c.section("optim");
  auto setup = build_optimizer(o, 10, 100);
  EXPECT_EQ(setup.optimizer->name(), "sgd");
  EXPECT_DOUBLE_EQ(setup.schedule.at(0), 0.05);
  try {
    c.finish();
    FAIL() << "beta1 is not an SGD key";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("key 'optim.beta1' is not used by optim.name = \"sgd\" (only by \"adamw\")"),
              std::string::npos)
        << e.what();
  }
}

TEST(BuildOptimizer, UnknownNameAndBadValues) {
  for (const char* text : {"[optim]\nname = \"lamb\"\n", "[optim]\nlr = -1.0\n", "[optim]\nmomentum = 1.5\n",
                           "[optim]\nschedule = \"poly\"\n"}) {
    Config c = Config::parse(text, "o.toml");
    Config o = c.section("optim");
    EXPECT_THROW(build_optimizer(o, 1, 1), ConfigError) << text;
  }
}

}  // namespace
}  // namespace ringtrain
