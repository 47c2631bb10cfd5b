// DataParallelStep (see header). Loss and accuracy ride in a second, tiny allreduce after
// the buckets, so every rank sees the same global loss and can stop together on a
// non-finite one. The overflow check runs on the reduced gradients, which are identical on
// every rank, so all ranks skip (or apply) a step alike without another collective.
// On the GPU the batch is uploaded once per step (a raw uint8 one is augmented there), the
// loss runs on the device, and the gradient buckets go straight to a communicator taking device
// memory (NCCL, overlapped with backward) or through a host copy of the arena to the MPI ring
// after backward (none in a world of one). With train.cuda_graph the forward, loss and backward replay as one CUDA
// graph and the buckets are reduced after it (NCCL calls stay outside the graph).
// The checks on the reduced gradients (non-finite values, the clipping norm) are summed per
// rank shard and completed by the same small allreduce as the loss, so that ZeRO, where each
// rank holds only its shard of the sums, needs no extra collective and clips bitwise alike.
#include "ringtrain/train/data_parallel_step.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>

#include "cuda/gpu_backend.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/grad_bucketer.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/monitor/tracer.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/grad_scaler.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/tensor/memory_pool.hpp"
#include "ringtrain/tensor/rounding.hpp"
#include "ringtrain/tensor/tensor_ops.hpp"
#include "ringtrain/train/step_decision.hpp"
#include "train/device_batch.hpp"
#include "train/step_graph.hpp"
#include "train/step_loss.hpp"
#include "train/step_stats.hpp"
#include "train/zero_gradients.hpp"
#include "train/zero_parameters.hpp"

namespace ringtrain {
namespace {
using Clock = std::chrono::steady_clock;
double between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
std::int64_t elements_of_mb(double mb) {
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(mb * (1 << 20) / 4));
}

// Why the step cannot run as a CUDA graph, or "" when it can.
std::string cuda_graph_obstacle(const Model& model, const StepOptions& options) {
  if (model.device() != Device::cuda) return "the model is not on a GPU";
  if (options.accumulation_steps > 1) return "train.accumulation_steps > 1";
  // Staged buckets are reduced while backward runs, which waits for their buffers on the host.
  if (options.zero_stage >= 2) return "train.zero_stage >= 2";
  return "";
}
// train.zero_stage's range: checked where the set-up first needs the stage (the optimizer's
// ranges, which the step asks for too), before a checkpoint is resumed.
void check_zero_stage(const StepOptions& options) {
  RT_REQUIRE(options.zero_stage >= 0 && options.zero_stage <= 3, ConfigError,
             "train.zero_stage: must be 0, 1, 2 or 3, got {}", options.zero_stage);
}
}  // namespace

std::vector<Bucket> plan_step_buckets(const Model& model, const StepOptions& options) {
  return plan_buckets(model.arena_elements(), model.gradient_cuts(), elements_of_mb(options.bucket_mb),
                      elements_of_mb(options.first_bucket_mb));
}

std::vector<ArenaRange> step_owned_ranges(const Model& model, const StepOptions& options, int world, int rank) {
  check_zero_stage(options);
  if (options.zero_stage == 0) return {{0, model.arena_elements()}};
  return bucket_shards(plan_step_buckets(model, options), world, rank);
}

std::int64_t label_positions(const Model& model) {
  const Shape& out = model.output_shape();
  return out.numel() / out[out.rank() - 1];
}

DataParallelStep::DataParallelStep(Model& model, Optimizer& optimizer, Communicator& stats_comm,
                                   Communicator& grad_comm, std::int64_t micro_batch, const StepOptions& options,
                                   Tracer* tracer, GradScaler* scaler)
    : model_(model),
      optimizer_(optimizer),
      stats_comm_(stats_comm),
      grad_comm_(grad_comm),
      options_(options),
      micro_batch_(micro_batch),
      positions_(label_positions(model)),
      tracer_(tracer),
      scaler_(scaler != nullptr && scaler->enabled() ? scaler : nullptr),
      dlogits_(Tensor::empty(model.output_shape().with_batch(micro_batch), model.activation_dtype(), model.device())) {
  RT_REQUIRE(options.accumulation_steps >= 1, ConfigError, "train.accumulation_steps: must be >= 1, got {}",
             options.accumulation_steps);
  RT_REQUIRE(options.bucket_mb > 0 && options.first_bucket_mb > 0, ConfigError,
             "comm.bucket_mb and comm.first_bucket_mb: must be > 0 (got {}, {})", options.bucket_mb,
             options.first_bucket_mb);
  const std::int64_t k = options.accumulation_steps;
  if (k > 1) carry_ = Tensor::empty(Shape{model.arena_elements()}, DType::f32, model.device());
  buckets_ = plan_step_buckets(model, options);
  const int world = stats_comm.size();
  for (int r = 0; r < world; ++r) shards_.push_back(bucket_shards(buckets_, world, r));
  const std::vector<ArenaRange> owned = step_owned_ranges(model, options, world, stats_comm.rank());
  const std::vector<ArenaRange>& held = optimizer.owned();
  RT_REQUIRE(held.size() == owned.size() && std::equal(held.begin(), held.end(), owned.begin(),
                                                       [](const ArenaRange& a, const ArenaRange& b) {
                                                         return a.offset == b.offset && a.count == b.count;
                                                       }),
             Error,
             "data-parallel step: the optimizer does not own this rank's ranges (build it with step_owned_ranges)");
  std::optional<BucketStaging> staging;
  if (options.zero_stage >= 2) {  // no gradient arena: each bucket is staged, then only this rank's shard is kept
    zero_grads_ = std::make_unique<ZeroGradients>(buckets_, model.param_layout().pads(), world, stats_comm.rank(),
                                                  model.device());
    model.place_gradients(zero_grads_->places());
    staging = zero_grads_->staging();
  }
  float* bucket_arena = zero_grads_ ? nullptr : model.grads().f32();
  bool overlap = options.overlap;
  loss_ = make_step_loss(model.device(), micro_batch * positions_, k);
  // A GPU step (stage 0, no phase timing) decides on the device; the norms of stage 0's shards
  // count on rank 0 alone (every rank holds the same reduced gradients).
  if (model.device() == Device::cuda && options.zero_stage == 0 && !options.phase_timing)
    device_stats_ = gpu("runtime.backend=cuda").make_step_stats(shards_, stats_comm.rank() == 0);
  placer_ = make_device_batch(model.device(), micro_batch * k, model.input_shape(), model.input_dtype(), positions_,
                              options.gpu_augment ? &*options.gpu_augment : nullptr);
  if (model.device() == Device::cuda) {
    // Accumulated gradients are added on the device after the last backward, before any bucket.
    if (k > 1) overlap = false;
    // The buckets are device memory: NCCL's, or MPI's staged through pinned host memory
    // (make_run_comms). A world of one reduces nothing (the communicator returns at once).
    RT_REQUIRE(grad_comm.device_memory() || world == 1, Error,
               "DataParallelStep: a GPU model's gradients need a communicator that takes device memory (nccl, or "
               "MPI staged through host memory as make_run_comms makes it), not {}",
               grad_comm.name());
  }
  if (options.cuda_graph) {
    graph_refused_ = cuda_graph_obstacle(model, options);
    if (graph_refused_.empty()) {
      graph_ = gpu("train.cuda_graph").make_step_graph();
      overlap = false;  // the buckets are reduced after the graph's backward
    }
  }
  bucketer_ = std::make_unique<GradBucketer>(
      bucket_arena, model.arena_elements(), buckets_, grad_comm, overlap, tracer,
      options.zero_stage > 0 ? BucketReduction::reduce_scatter : BucketReduction::allreduce, std::move(staging),
      model.device());
  if (options.zero_stage >= 3)  // the parameters are gathered group by group, on the buckets' comm thread
    zero_params_ = std::make_unique<ZeroParameters>(model, buckets_, world, stats_comm.rank(), grad_comm,
                                                    bucketer_->comm_thread(), tracer);
}

DataParallelStep::~DataParallelStep() = default;

std::size_t DataParallelStep::num_buckets() const { return bucketer_->buckets().size(); }

StepMemory DataParallelStep::memory() const {
  StepMemory m;
  m.parameters = zero_params_ ? zero_params_->kept_bytes() : model_.parameter_bytes();
  m.gathered_parameters = zero_params_ ? zero_params_->gathered_bytes() : 0;
  m.gradients = static_cast<std::int64_t>(allocated_bytes(model_.grads()) + allocated_bytes(carry_)) +
                model_.tied_gradient_bytes() + (zero_grads_ ? zero_grads_->shard_bytes() : 0);
  for (const Optimizer::StateBuffer& b : optimizer_.state())
    m.optimizer_state += static_cast<std::int64_t>(allocated_bytes(b.tensor));
  m.activations = model_.activation_bytes();
  m.comm_buffers =
      static_cast<std::int64_t>(grad_comm_.staging_bytes()) + (zero_grads_ ? zero_grads_->staging_bytes() : 0);
  return m;
}

bool DataParallelStep::overlapped() const { return bucketer_->overlap(); }

void DataParallelStep::backward_and_reduce(bool last) {
  Tensor& grads = model_.grads();
  const std::int64_t k = options_.accumulation_steps;
  if (!last && zero_grads_) {  // staged buckets join the carry one by one, as they are ready
    bucketer_->begin_accumulation(carry_.f32(), micro_index_ == 0);
    model_.backward(dlogits_, [this](std::int64_t ready_from) { bucketer_->on_ready(ready_from); });
    return;
  }
  if (!last) {  // an earlier micro-batch: its gradients join the carry
    model_.backward(dlogits_);
    if (micro_index_ == 0) {
      copy_into(carry_, grads);
    } else {
      add_into(carry_, grads);
    }
    return;
  }
  // The CPU, and staged buckets anywhere: the bucketer adds the carry to each bucket just before it is reduced.
  if (model_.device() == Device::cpu || zero_grads_) {
    bucketer_->begin_step(k > 1 ? carry_.f32() : nullptr);
    model_.backward(dlogits_, [this](std::int64_t ready_from) { bucketer_->on_ready(ready_from); });
    return;
  }
  if (bucketer_->overlap()) {  // NCCL, one micro-batch: buckets launch as their layers finish
    bucketer_->begin_step(nullptr);
    model_.backward(dlogits_, [this](std::int64_t ready_from) { bucketer_->on_ready(ready_from); });
    return;
  }
  model_.backward(dlogits_);
  reduce_after_backward();
}

void DataParallelStep::reduce_after_backward() {
  Tensor& grads = model_.grads();
  if (options_.accumulation_steps > 1) add_into(grads, carry_);
  bucketer_->begin_step(nullptr);
  bucketer_->on_ready(0);
}

void DataParallelStep::forward_and_loss(const Tensor& x, const std::int32_t* labels, const StepInfo& info,
                                        float loss_scale) {
  const Tensor& logits = model_.forward(x, info);
  const Shape rows{logits.shape()[0] * positions_, logits.shape().dims().back()};
  Tensor dlogits = dlogits_.reshape(rows);
  loss_->compute(logits.reshape(rows), labels, dlogits, loss_scale, info.micro_batch);
  // The loss gradient enters backward in the compute dtype (the CPU emulation rounds it).
  if (model_.device() == Device::cpu) round_in_place(dlogits_.f32(), dlogits_.numel(), model_.compute_dtype());
}

bool DataParallelStep::graphed() const { return graph_ != nullptr && graph_->active(); }

std::uint64_t DataParallelStep::graph_replays() const { return graph_ != nullptr ? graph_->replays() : 0; }

StepResult DataParallelStep::run(const Tensor& x, const std::int32_t* labels, const StepInfo& info, float lr) {
  return run_placed([&] { return place(x.raw(), [&] { placer_->stage(x, labels); }); }, info, lr);
}

StepResult DataParallelStep::run(const Batch& batch, const StepInfo& info, float lr) {
  if (batch.raw.raw() == nullptr) return run(batch.x, batch.labels.data(), info, lr);
  return run_placed(
      [&] {
        return place(batch.raw.raw(), [&] { placer_->stage_raw(batch.raw, batch.draws.data(), batch.labels.data()); });
      },
      info, lr);
}

void DataParallelStep::stage_next(const Tensor& x, const std::int32_t* labels) {
  placer_->stage(x, labels);
  staged_next_ = x.raw();
}

void DataParallelStep::stage_next(const Batch& batch) {
  if (batch.raw.raw() == nullptr) return stage_next(batch.x, batch.labels.data());
  placer_->stage_raw(batch.raw, batch.draws.data(), batch.labels.data());
  staged_next_ = batch.raw.raw();
}

PlacedBatch DataParallelStep::place(const void* host, const std::function<void()>& stage) {
  const bool staged = staged_next_ != nullptr && staged_next_ == host;
  staged_next_ = nullptr;
  if (!staged) stage();
  return placer_->place();
}

template <typename Then>
void DataParallelStep::with_upcoming(Then&& then) {
  std::exception_ptr error;
  try {
    if (upcoming_) upcoming_();
  } catch (...) {
    error = std::current_exception();
  }
  then();
  if (error) std::rethrow_exception(error);
}

StepResult DataParallelStep::run_placed(const std::function<PlacedBatch()>& place, const StepInfo& info, float lr) {
  const std::int64_t k = options_.accumulation_steps;
  StepResult r;
  r.scale_before = scaler_ != nullptr ? scaler_->scale() : 1.0;
  const auto start = Clock::now();
  const PlacedBatch batch = place();
  const float scale = static_cast<float>(r.scale_before);
  Clock::time_point backward_end = start;
  for (micro_index_ = 0; micro_index_ < k; ++micro_index_) {
    const std::int64_t m = micro_index_;
    const Tensor input = batch.x.rows(m * micro_batch_, micro_batch_);
    const std::int32_t* micro_labels = batch.labels + m * micro_batch_ * positions_;
    StepInfo micro_info = info;  // each micro-batch draws its own dropout masks
    micro_info.micro_batch = m;
    const auto t0 = Clock::now();
    model_.begin_step(micro_info);    // per-step device state (dropout keys), outside the graph
    if (graph_) {                     // one micro-batch: forward, loss and backward as one graph launch
      model_.refresh_compute_copy();  // outside the graph: a replay runs no host code
      const StepGraphKey key{micro_batch_, scale, gpu("train.cuda_graph").pool().stats().allocations};
      graph_->run(key, [&] {
        forward_and_loss(input, micro_labels, micro_info, scale);
        model_.backward(dlogits_);
      });
    } else {
      forward_and_loss(input, micro_labels, micro_info, scale);
    }
    wait_for_phase();  // the loss sums are read after backward: no host wait here unless timing phases
    const auto t1 = Clock::now();
    trace(graph_ ? "forward+backward" : "forward", t0, t1);
    r.forward_s += between(t0, t1);
    if (graph_) {
      reduce_after_backward();
    } else {
      backward_and_reduce(m + 1 == k);
      wait_for_phase();
    }
    backward_end = Clock::now();
    trace("backward", t1, backward_end);
    r.backward_s += between(t1, backward_end);
  }
  return device_stats_ ? finish_on_device(r, info, lr, start, backward_end)
                       : finish_on_host(r, info, lr, start, backward_end);
}

StepResult DataParallelStep::finish_on_host(StepResult r, const StepInfo& info, float lr, Clock::time_point start,
                                            Clock::time_point backward_end) {
  const std::int64_t k = options_.accumulation_steps;
  const std::int64_t n = model_.arena_elements();
  const BucketTimes bt = bucketer_->finish();
  const LossSums sums = loss_->sums(k);  // on the GPU: waits for the queued work
  const auto buckets_done = Clock::now();
  const std::size_t world = shards_.size();
  std::vector<double> stats(kStepStatsHeader + world, 0.0);  // loss, correct, then gradient_checks
  stats[0] = sums.loss / static_cast<double>(micro_batch_ * positions_);
  stats[1] = sums.correct;
  gradient_checks(stats.data() + 2);
  const auto checked = Clock::now();
  stats_comm_.allreduce_sum(stats.data(), stats.size(), DType::f64);
  const auto reduced = Clock::now();
  trace("exposed communication", backward_end, buckets_done);
  trace("gradient checks", buckets_done, checked);
  const StepDecision d = decide(stats, r.scale_before);
  settle(d, stats, info, r);
  auto optimized = reduced;
  if (!d.overflow) {
    const auto update_scale = static_cast<float>(d.update_scale);
    if (zero_grads_) {
      optimizer_.step_packed(model_.params().f32(), zero_grads_->shard().f32(), n, lr, update_scale);
    } else {
      const ComputeCopyOut copy = model_.compute_copy();  // bf16/f16 on a GPU: written by the same pass
      optimizer_.step(model_.params().f32(), model_.grads().f32(), n, lr, update_scale, copy);
      if (copy.data != nullptr) model_.compute_copy_written();
    }
    wait_for_phase();
    optimized = Clock::now();
    if (options_.zero_stage == 1 || options_.zero_stage == 2) allgather_params();
  }
  with_upcoming([&] { wait_for_phase(); });
  const auto end = Clock::now();
  trace("optimizer", reduced, optimized);
  r.optimizer_s = between(buckets_done, checked) + between(reduced, optimized);
  r.allreduce_s = bt.allreduce_s;
  r.allgather_s = between(optimized, end);
  r.exposed_s = between(backward_end, buckets_done) + between(checked, reduced) + r.allgather_s;
  r.compute_s = between(start, end) - r.exposed_s;
  return r;
}

StepResult DataParallelStep::finish_on_device(StepResult r, const StepInfo& info, float lr, Clock::time_point start,
                                              Clock::time_point backward_end) {
  const std::int64_t k = options_.accumulation_steps;
  const std::int64_t n = model_.arena_elements();
  const BucketTimes bt = bucketer_->finish(/*on_device=*/true);
  device_stats_->gather(*loss_, k, static_cast<double>(micro_batch_ * positions_), model_.grads().f32(), n,
                        scaler_ != nullptr, options_.clip_grad_norm > 0.0);
  if (shards_.size() > 1) {
    grad_comm_.enqueue_allreduce_sum_after(0, device_stats_->stats(), static_cast<std::size_t>(device_stats_->size()),
                                           DType::f64);
    grad_comm_.join_on_device();
  }
  const float* update_scale = device_stats_->decide(world_k(), r.scale_before, options_.clip_grad_norm);
  const ComputeCopyOut copy = model_.compute_copy();  // bf16/f16: written by the same pass (or left, skipped)
  optimizer_.step_scaled_on_device(model_.params().f32(), model_.grads().f32(), n, lr, update_scale, copy);
  if (copy.data != nullptr) model_.compute_copy_written();
  device_stats_->copy_to_host();
  const auto queued = Clock::now();
  double collectives_s = 0.0;
  std::vector<double> stats;
  with_upcoming([&] {
    collectives_s = grad_comm_.complete();  // the one host wait: with the timeout's abort
    stats = device_stats_->read();
  });
  const auto end = Clock::now();
  trace("queued: forward to optimizer", backward_end, queued);
  trace("device finishing the step", queued, end);
  const StepDecision d = decide(stats, r.scale_before);
  if (d.overflow) optimizer_.restore_steps_taken(optimizer_.steps_taken() - 1);  // the device skipped it
  settle(d, stats, info, r);
  r.allreduce_s = bt.allreduce_s + collectives_s;
  r.compute_s = between(start, end);  // queued at once and waited for once: the parts are not timed apart
  return r;
}

double DataParallelStep::world_k() const {
  return static_cast<double>(shards_.size()) * static_cast<double>(options_.accumulation_steps);
}

StepDecision DataParallelStep::decide(const std::vector<double>& stats, double loss_scale) const {
  return decide_step(stats.data(), static_cast<int>(shards_.size()), world_k(), loss_scale, options_.clip_grad_norm);
}

void DataParallelStep::settle(const StepDecision& d, const std::vector<double>& stats, const StepInfo& info,
                              StepResult& r) {
  r.loss = d.loss;
  r.correct = stats[1];
  if (scaler_ != nullptr) {  // the loss and the gradient checks are the same on every rank: all decide alike
    try {
      scaler_->update(d.overflow);
    } catch (const NumericError& e) {
      throw CollectiveError(fmt::format("global step {}: {}", info.step + 1, e.what()));
    }
    r.skipped = d.overflow;
    r.scale_after = scaler_->scale();
  } else if (!std::isfinite(r.loss)) {  // the same value on every rank: all stop together
    throw CollectiveError(
        fmt::format("non-finite loss ({}) at global step {}; lower optim.lr or check the data", r.loss, info.step + 1));
  }
  if (!d.overflow && options_.clip_grad_norm > 0.0) r.grad_norm = d.grad_norm;
}

void DataParallelStep::trace(const char* name, Clock::time_point begin, Clock::time_point end) const {
  if (tracer_ != nullptr) tracer_->span(name, "compute", begin, end);
}

void DataParallelStep::wait_for_phase() const {
  if (options_.phase_timing) synchronize(model_.device());
}

void DataParallelStep::gradient_checks(double* checks) const {
  const int rank = stats_comm_.rank();
  const bool whole = options_.zero_stage == 0;  // every rank holds every reduced gradient
  const Tensor& grads = model_.grads();
  // Stage 2: the rank's shard, packed (the same elements in the same order as its ranges).
  const std::vector<ArenaRange> packed{{0, zero_grads_ ? zero_grads_->shard().numel() : 0}};
  bool nonfinite = false;
  for (std::size_t q = 0; q < shards_.size(); ++q) {
    if (!whole && static_cast<int>(q) != rank) continue;
    double sum = 0.0;
    for (const ArenaRange& a : zero_grads_ ? packed : shards_[q]) {
      const Tensor part = (zero_grads_ ? zero_grads_->shard() : grads).rows(a.offset, a.count);
      if (scaler_ != nullptr) nonfinite = nonfinite || has_nonfinite(part);
      if (options_.clip_grad_norm > 0.0) sum += sum_of_squares(part);
    }
    // Stage 0: rank 0's sums alone enter the allreduce (the others add zeros, which is exact).
    checks[1 + q] = whole && rank != 0 ? 0.0 : sum;
  }
  checks[0] = nonfinite ? 1.0 : 0.0;
}

void DataParallelStep::allgather_params() {
  float* params = model_.params().f32();
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = buckets_[i];
    const auto begin = Clock::now();
    grad_comm_.allgather(params + b.begin, static_cast<std::size_t>(b.end - b.begin), DType::f32);
    if (tracer_ != nullptr)
      tracer_->span(fmt::format("allgather bucket {}", i), "comm", begin, Clock::now(), Tracer::kComm);
  }
}

}  // namespace ringtrain
