// decide_step, the rule a data-parallel step's host and device both apply to the ranks' summed
// statistics: the mean loss, overflow from a non-finite loss or a rank's non-finite gradient,
// the averaging scale (ranks x micro-batches x loss scale) and clipping by the global norm, each
// against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ringtrain/train/step_decision.hpp"

namespace ringtrain {
namespace {

// [loss, correct, non-finite ranks, then each shard's sum of squares]
std::vector<double> stats(double loss, double nonfinite, std::vector<double> norms) {
  std::vector<double> s{loss, 7.0, nonfinite};
  s.insert(s.end(), norms.begin(), norms.end());
  return s;
}

TEST(StepDecision, AveragesOverRanksMicroBatchesAndTheLossScale) {
  const auto s = stats(6.0, 0.0, {9.0, 16.0});
  const StepDecision d = decide_step(s.data(), 2, 4.0, 1024.0, 0.0);
  EXPECT_EQ(d.loss, 1.5);
  EXPECT_FALSE(d.overflow);
  EXPECT_EQ(d.update_scale, 1.0 / 4096.0);
  EXPECT_EQ(d.grad_norm, 0.0) << "not computed without clipping";
}

TEST(StepDecision, ClipsByTheNormOfTheAveragedGradients) {
  const auto s = stats(1.0, 0.0, {9.0, 16.0});  // summed gradients' norm 5, averaged over 2: 2.5
  const StepDecision clipped = decide_step(s.data(), 2, 2.0, 1.0, 1.0);
  EXPECT_EQ(clipped.grad_norm, 2.5);
  EXPECT_DOUBLE_EQ(clipped.update_scale, 0.5 / 2.5);  // the averaged gradients scaled to norm 1
  const StepDecision kept = decide_step(s.data(), 2, 2.0, 1.0, 10.0);
  EXPECT_EQ(kept.grad_norm, 2.5);
  EXPECT_EQ(kept.update_scale, 0.5) << "a norm under the limit leaves the scale";
  // the loss scale is undone before the norm is compared: scale 4 gives the same decision
  const auto scaled = stats(4.0, 0.0, {9.0 * 16.0, 16.0 * 16.0});
  const StepDecision same = decide_step(scaled.data(), 2, 2.0, 4.0, 1.0);
  EXPECT_EQ(same.grad_norm, 2.5);
  EXPECT_DOUBLE_EQ(same.update_scale * 4.0, clipped.update_scale);
}

TEST(StepDecision, OverflowsOnANonFiniteLossOrGradient) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(decide_step(stats(1.0, 1.0, {1.0}).data(), 1, 1.0, 1.0, 0.0).overflow) << "a rank's gradient";
  EXPECT_TRUE(decide_step(stats(inf, 0.0, {1.0}).data(), 1, 1.0, 1.0, 0.0).overflow);
  EXPECT_TRUE(decide_step(stats(nan, 0.0, {1.0}).data(), 1, 1.0, 1.0, 0.0).overflow);
  EXPECT_FALSE(decide_step(stats(1e300, 0.0, {1.0}).data(), 1, 1.0, 1.0, 0.0).overflow);
}

}  // namespace
}  // namespace ringtrain
