// GradScaler: backoff on overflow, growth after growth_interval clean steps, static scale,
// the minimum scale error, option validation, and a state round trip that continues exactly.
#include <gtest/gtest.h>

#include "ringtrain/core/error.hpp"
#include "ringtrain/optim/grad_scaler.hpp"

namespace ringtrain {
namespace {

LossScaleOptions options(double init, std::int64_t interval) {
  LossScaleOptions o;
  o.init = init;
  o.growth_interval = interval;
  return o;
}

TEST(GradScaler, DisabledHasScaleOneAndAppliesEveryStep) {
  GradScaler s;
  EXPECT_FALSE(s.enabled());
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.skipped_steps(), 0);
}

TEST(GradScaler, BacksOffOnOverflowAndSkips) {
  GradScaler s(options(65536.0, 2000));
  EXPECT_TRUE(s.enabled());
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 16384.0);
  EXPECT_EQ(s.skipped_steps(), 2);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 16384.0);
  EXPECT_EQ(s.skipped_steps(), 2);
}

TEST(GradScaler, GrowsAfterGrowthIntervalCleanSteps) {
  LossScaleOptions o = options(8.0, 3);
  o.growth_factor = 4.0;
  GradScaler s(o);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 8.0);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 32.0);
  EXPECT_EQ(s.state().good_steps, 0);
  // An overflow restarts the count of clean steps.
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 16.0);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 16.0);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 64.0);
}

TEST(GradScaler, StaticScaleSkipsButNeverChanges) {
  LossScaleOptions o = options(1024.0, 1);
  o.dynamic = false;
  GradScaler s(o);
  EXPECT_FALSE(s.update(true));
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.skipped_steps(), 1);
}

TEST(GradScaler, BelowTheMinimumScaleThrowsInsteadOfLoopingForever) {
  GradScaler s(options(1.0, 2000));
  int skipped = 0;
  try {
    for (; skipped < 1000; ++skipped) ASSERT_FALSE(s.update(true));
    FAIL() << "no error after 1000 overflowing steps";
  } catch (const NumericError& e) {
    EXPECT_NE(std::string(e.what()).find("diverged"), std::string::npos) << e.what();
  }
  EXPECT_EQ(skipped, 24);  // 1 -> 2^-24 in 24 backoffs; the 25th would go below
  EXPECT_EQ(s.scale(), GradScaler::kMinScale);
}

TEST(GradScaler, InvalidOptionsNameTheKey) {
  const auto error_of = [](LossScaleOptions o) {
    try {
      GradScaler s(o);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  LossScaleOptions o;
  o.init = 0.0;
  EXPECT_NE(error_of(o).find("loss_scale.init"), std::string::npos);
  o = LossScaleOptions{};
  o.growth_interval = 0;
  EXPECT_NE(error_of(o).find("loss_scale.growth_interval"), std::string::npos);
  o = LossScaleOptions{};
  o.growth_factor = 1.0;
  EXPECT_NE(error_of(o).find("loss_scale.growth_factor"), std::string::npos);
  o = LossScaleOptions{};
  o.backoff_factor = 1.0;
  EXPECT_NE(error_of(o).find("loss_scale.backoff_factor"), std::string::npos);
}

TEST(GradScaler, StateRoundTripContinuesExactly) {
  const LossScaleOptions o = options(1024.0, 4);
  GradScaler a(o);
  const bool pattern[] = {false, false, true, false, false, false, false, true, false, false};
  for (bool f : pattern) a.update(f);
  EXPECT_EQ(a.scale(), 512.0);
  EXPECT_EQ(a.state().good_steps, 2);
  EXPECT_EQ(a.skipped_steps(), 2);
  GradScaler b(o);
  b.restore(a.state());
  EXPECT_EQ(b.scale(), 512.0);
  // Two clean steps into its interval of 4: it grows after two more, as `a` would.
  EXPECT_TRUE(b.update(false));
  EXPECT_EQ(b.scale(), 512.0);
  EXPECT_TRUE(b.update(false));
  EXPECT_EQ(b.scale(), 1024.0);
  for (int i = 0; i < 2; ++i) a.update(false);
  for (int i = 0; i < 9; ++i) {
    const bool f = i == 5;
    EXPECT_EQ(a.update(f), b.update(f));
    EXPECT_EQ(a.scale(), b.scale()) << i;
    EXPECT_EQ(a.state().good_steps, b.state().good_steps);
  }
  EXPECT_EQ(b.skipped_steps(), 3);
}

}  // namespace
}  // namespace ringtrain
