// StepLoss (CPU): each compute() keeps its micro-batch's loss sum and correct count in its own
// slot, and sums(count) adds the step's slots in order, so the step can read them all at once
// after every backward is queued; a slot beyond those it was made with is an error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "train/step_loss.hpp"

namespace ringtrain {
namespace {

// Two rows of 3 logits: row 0 favours class 0, row 1 class 2.
struct Batch {
  std::vector<float> logits{2.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f};
  std::vector<float> dlogits = std::vector<float>(6);
  Tensor logits_t() { return Tensor::wrap(logits.data(), Shape{2, 3}); }
  Tensor dlogits_t() { return Tensor::wrap(dlogits.data(), Shape{2, 3}); }
};

double row_loss(const std::vector<float>& z, std::int32_t label) {
  double sum = 0.0;
  for (const float v : z) sum += std::exp(static_cast<double>(v));
  return std::log(sum) - z[static_cast<std::size_t>(label)];
}

TEST(StepLoss, EachMicroBatchKeepsItsSlotAndTheStepReadsTheirSum) {
  auto loss = make_step_loss(Device::cpu, 2, 2);
  Batch b;
  const std::vector<std::int32_t> first{0, 2}, second{1, 1};  // both right, then both wrong
  Tensor dl = b.dlogits_t();
  loss->compute(b.logits_t(), first.data(), dl, 1.0f, 0);
  loss->compute(b.logits_t(), second.data(), dl, 1.0f, 1);
  const double l0 = row_loss({2, 0, 0}, 0) + row_loss({0, 0, 1}, 2);
  const double l1 = row_loss({2, 0, 0}, 1) + row_loss({0, 0, 1}, 1);
  EXPECT_NEAR(loss->sums(1).loss, l0, 1e-6);
  EXPECT_EQ(loss->sums(1).correct, 2.0);
  const LossSums both = loss->sums(2);
  EXPECT_NEAR(both.loss, l0 + l1, 1e-6);
  EXPECT_EQ(both.correct, 2.0) << "the second micro-batch got none right";
  EXPECT_THROW(loss->compute(b.logits_t(), first.data(), dl, 1.0f, 2), Error);
  EXPECT_THROW(loss->sums(3), Error);
}

}  // namespace
}  // namespace ringtrain
