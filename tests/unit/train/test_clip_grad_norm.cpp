// optim.clip_grad_norm in the step: a step whose averaged gradient norm is above the bound
// updates exactly as the same step with the gradients scaled down to the bound (checked with
// SGD, whose update is linear in the gradient), and a bound above the norm changes nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/tensor/tensor_ops.hpp"
#include "ringtrain/train/data_parallel_step.hpp"

namespace ringtrain {
namespace {

struct OneStep {
  std::vector<float> before, after;
  double grad_norm = 0.0;
};

OneStep step_with_clip(double clip) {
  Config c = Config::parse("[[layers]]\ntype = \"linear\"\nout = 3\n", "m.toml");
  auto model = build_model(c, Shape{5});
  model->init_params(2);
  Sgd sgd(model->arena_elements(), SgdHyper{});
  auto stats = make_mpi_self_communicator(AllreduceAlgo::ring);
  auto grads = make_mpi_self_communicator(AllreduceAlgo::ring);
  StepOptions options;
  options.clip_grad_norm = clip;
  DataParallelStep step(*model, sgd, *stats, *grads, 4, options, nullptr);
  Tensor x = Tensor::empty(Shape{4, 5});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
  const std::vector<std::int32_t> labels = {0, 1, 2, 1};
  OneStep r;
  r.before.assign(model->params().f32(), model->params().f32() + model->arena_elements());
  r.grad_norm = step.run(x, labels.data(), StepInfo{true, 1, 0, 0}, 1.0f).grad_norm;
  r.after.assign(model->params().f32(), model->params().f32() + model->arena_elements());
  return r;
}

TEST(ClipGradNorm, ScalesTheUpdateDownToTheBound) {
  const OneStep free = step_with_clip(1e9);  // computes the norm, clips nothing
  ASSERT_GT(free.grad_norm, 0.0);
  const double bound = free.grad_norm / 4.0;
  const OneStep clipped = step_with_clip(bound);
  EXPECT_DOUBLE_EQ(clipped.grad_norm, free.grad_norm);
  double norm = 0.0;  // the applied update (lr 1): -clipped gradient
  for (std::size_t i = 0; i < free.before.size(); ++i) {
    const double unclipped = free.after[i] - free.before[i];
    const double applied = clipped.after[i] - clipped.before[i];
    EXPECT_NEAR(applied, unclipped / 4.0, 1e-6) << i;
    norm += applied * applied;
  }
  EXPECT_NEAR(std::sqrt(norm), bound, 1e-5 * bound);
}

TEST(ClipGradNorm, ABoundAboveTheNormChangesNothing) {
  const OneStep off = step_with_clip(0.0);
  const OneStep high = step_with_clip(1e9);
  EXPECT_EQ(off.grad_norm, 0.0);  // not computed without clipping
  EXPECT_EQ(off.after, high.after);
}

TEST(SumOfSquares, AccumulatesInDouble) {
  Tensor t = Tensor::empty(Shape{3});
  t.f32()[0] = 3.0f;
  t.f32()[1] = -4.0f;
  t.f32()[2] = 1e-4f;
  EXPECT_NEAR(sum_of_squares(t), 25.0 + 1e-8, 1e-12);
}

}  // namespace
}  // namespace ringtrain
