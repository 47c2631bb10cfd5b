// DataParallelStep (see header). Loss and accuracy ride in a second, tiny allreduce after
// the buckets, so every rank sees the same global loss and can stop together on a
// non-finite one.
#include "ringtrain/train/data_parallel_step.hpp"

#include <chrono>
#include <cmath>
#include <cstring>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/grad_bucketer.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/monitor/tracer.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/runtime/collective.hpp"

namespace ringtrain {
namespace {
using Clock = std::chrono::steady_clock;
double between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
std::int64_t elements_of_mb(double mb) { return std::max<std::int64_t>(1, static_cast<std::int64_t>(mb * (1 << 20) / 4)); }
}  // namespace

DataParallelStep::DataParallelStep(Model& model, Optimizer& optimizer, Communicator& stats_comm,
                                   Communicator& grad_comm, std::int64_t micro_batch, std::int64_t num_classes,
                                   const StepOptions& options, Tracer* tracer)
    : model_(model),
      optimizer_(optimizer),
      stats_comm_(stats_comm),
      options_(options),
      micro_batch_(micro_batch),
      tracer_(tracer),
      dlogits_(Tensor::empty(Shape{micro_batch, num_classes})) {
  RT_REQUIRE(options.accumulation_steps >= 1, ConfigError, "train.accumulation_steps: must be >= 1, got {}",
             options.accumulation_steps);
  RT_REQUIRE(options.bucket_mb > 0 && options.first_bucket_mb > 0, ConfigError,
             "comm.bucket_mb and comm.first_bucket_mb: must be > 0 (got {}, {})", options.bucket_mb,
             options.first_bucket_mb);
  if (options.accumulation_steps > 1) carry_ = Tensor::empty(Shape{model.num_params()});
  bucketer_ = std::make_unique<GradBucketer>(
      model.grads().f32(), model.num_params(),
      plan_buckets(model.num_params(), model.param_layer_offsets(), elements_of_mb(options.bucket_mb),
                   elements_of_mb(options.first_bucket_mb)),
      grad_comm, options.overlap, tracer);
}

DataParallelStep::~DataParallelStep() = default;

std::size_t DataParallelStep::num_buckets() const { return bucketer_->buckets().size(); }

StepResult DataParallelStep::run(const Tensor& x, const std::int32_t* labels, const StepInfo& info, float lr) {
  const std::int64_t k = options_.accumulation_steps;
  const std::int64_t n = model_.num_params();
  float* grads = model_.grads().f32();
  StepResult r;
  double loss_sum = 0.0, correct = 0.0;
  auto trace = [&](const char* name, Clock::time_point a, Clock::time_point b) {
    if (tracer_ != nullptr) tracer_->span(name, "compute", a, b);
  };
  const auto start = Clock::now();
  Clock::time_point backward_end = start;
  for (std::int64_t m = 0; m < k; ++m) {
    const bool last = m + 1 == k;
    const Tensor xm = x.rows(m * micro_batch_, micro_batch_);
    const auto t0 = Clock::now();
    loss_sum += loss_.forward(model_.forward(xm, info), labels + m * micro_batch_);
    correct += static_cast<double>(loss_.correct());
    loss_.backward(dlogits_);
    const auto t1 = Clock::now();
    trace("forward", t0, t1);
    r.forward_s += between(t0, t1);
    if (last) {
      bucketer_->begin_step(k > 1 ? carry_.f32() : nullptr);
      model_.backward(dlogits_, [this](std::int64_t ready_from) { bucketer_->on_ready(ready_from); });
    } else {
      model_.backward(dlogits_);
      float* carry = carry_.f32();
      if (m == 0) {
        std::memcpy(carry, grads, static_cast<std::size_t>(n) * sizeof(float));
      } else {
        for (std::int64_t i = 0; i < n; ++i) carry[i] += grads[i];
      }
    }
    backward_end = Clock::now();
    trace("backward", t1, backward_end);
    r.backward_s += between(t1, backward_end);
  }
  const BucketTimes bt = bucketer_->finish();
  double stats[2] = {loss_sum, correct};
  stats_comm_.allreduce_sum(stats, 2, DType::f64);
  const auto reduced = Clock::now();
  trace("exposed communication", backward_end, reduced);
  const double world = stats_comm_.size();
  r.loss = stats[0] / (world * static_cast<double>(k));
  r.correct = stats[1];
  if (!std::isfinite(r.loss))  // the same value on every rank: all stop together
    throw CollectiveError(fmt::format("non-finite loss ({}) at global step {}; lower optim.lr or check the data", r.loss,
                                      info.step + 1));
  optimizer_.step(model_.params().f32(), grads, n, lr, 1.0f / static_cast<float>(world * static_cast<double>(k)));
  const auto end = Clock::now();
  trace("optimizer", reduced, end);
  r.optimizer_s = between(reduced, end);
  r.allreduce_s = bt.allreduce_s;
  r.exposed_s = between(backward_end, reduced);
  r.compute_s = between(start, end) - r.exposed_s;
  return r;
}

}  // namespace ringtrain
