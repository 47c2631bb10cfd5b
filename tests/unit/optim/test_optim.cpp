// Optimizers against hand-computed updates (PyTorch semantics) and the LR schedules'
// shapes; config errors name their key.
#include <gtest/gtest.h>

#include <cmath>

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
  o.total_steps = 110;
  o.min_lr = 0.1;
  const LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);  // warmup: (step + 1) / warmup
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);     // cosine starts at base
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // halfway: (base + min) / 2
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
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
