// DataParallelStep (see header). The loss and accuracy ride in a second, tiny allreduce so
// every rank sees the same global loss and can stop together on a non-finite one.
#include "ringtrain/train/data_parallel_step.hpp"

#include <chrono>
#include <cmath>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/runtime/collective.hpp"

namespace ringtrain {
namespace {
using Clock = std::chrono::steady_clock;
double between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
}  // namespace

DataParallelStep::DataParallelStep(Model& model, Optimizer& optimizer, Communicator& comm, std::int64_t batch,
                                   std::int64_t num_classes)
    : model_(model), optimizer_(optimizer), comm_(comm), dlogits_(Tensor::empty(Shape{batch, num_classes})) {}

StepResult DataParallelStep::run(const Tensor& x, const std::int32_t* labels, const StepInfo& info, float lr) {
  const auto t0 = Clock::now();
  const double loss = loss_.forward(model_.forward(x, info), labels);
  loss_.backward(dlogits_);
  model_.backward(dlogits_);
  const auto t1 = Clock::now();
  float* grads = model_.grads().f32();
  const std::int64_t n = model_.num_params();
  comm_.allreduce_sum(grads, static_cast<std::size_t>(n), DType::f32);
  double stats[2] = {loss, static_cast<double>(loss_.correct())};
  comm_.allreduce_sum(stats, 2, DType::f64);
  const auto t2 = Clock::now();
  const double world = comm_.size();
  StepResult r;
  r.loss = stats[0] / world;
  r.correct = stats[1];
  if (!std::isfinite(r.loss))  // the same value on every rank: all stop together
    throw CollectiveError(fmt::format("non-finite loss ({}) at global step {}; lower optim.lr or check the data", r.loss,
                                      info.step + 1));
  optimizer_.step(model_.params().f32(), grads, n, lr, 1.0f / static_cast<float>(world));
  const auto t3 = Clock::now();
  r.compute_s = between(t0, t1) + between(t2, t3);
  r.comm_s = between(t1, t2);
  return r;
}

}  // namespace ringtrain
