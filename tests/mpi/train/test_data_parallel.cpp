// The data-parallel invariant: W ranks with per-rank batch 128/W end with the same
// parameters as one process with batch 128 after 20 steps (relative difference < 1e-5),
// for an MLP and a CNN, with the ring and with MPI_Allreduce. Also: overlapped and plain
// bucket paths give bitwise identical parameters, and gradient accumulation over k
// micro-batches equals one k-times larger batch. ZeRO stages 1 (sharded optimizer state,
// reduce-scattered gradients, allgathered parameters) and 2 (staged, sharded gradients) give
// bitwise the parameters of stage 0, with overlap or without, with accumulation and clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/shard.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/data/sampler.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/train/data_parallel_step.hpp"
#include "support/test_context.hpp"
#include "train/zero_parameters.hpp"

namespace ringtrain {
namespace {

constexpr std::int64_t kSamples = 1024, kGlobalBatch = 128, kSteps = 20;
const Shape kSample{1, 8, 8};

const char* kMlp = R"(
[[model.layers]]
type = "flatten"
[[model.layers]]
type = "linear"
out = 32
[[model.layers]]
type = "relu"
[[model.layers]]
type = "linear"
out = 10
)";

const char* kCnn = R"(
[[model.layers]]
type = "conv2d"
out_channels = 4
padding = 1
[[model.layers]]
type = "relu"
[[model.layers]]
type = "maxpool2d"
[[model.layers]]
type = "flatten"
[[model.layers]]
type = "linear"
out = 10
)";

// A deterministic synthetic sample: its pixels and label depend only on its global index.
void fill_sample(std::int64_t index, float* x, std::int32_t* label) {
  for (std::int64_t j = 0; j < kSample.numel(); ++j)
    x[j] = static_cast<float>(
        std::sin(0.37 * static_cast<double>(index) + 0.11 * static_cast<double>(j * (index % 7 + 1))));
  *label = static_cast<std::int32_t>((index * 7) % 10);
}

using CommFactory = std::function<std::unique_ptr<Communicator>()>;

// How batches reach the step: each run() given its batch, or the next batch staged from the
// step's upcoming hook (DataParallelStep::set_upcoming, as training on a GPU does), in the other
// of two host buffers; optionally with the hook failing once, at step kHookFails, after staging.
enum class Staging { none, ahead, ahead_failing_once };
constexpr std::int64_t kHookFails = 5;

// Trains for kSteps over the communicators `make_comm` gives (world W, this rank r) and
// returns the final parameters.
std::vector<float> train(const char* model_text, const CommFactory& make_comm, const StepOptions& options = {},
                         Staging staging = Staging::none) {
  auto stats_comm = make_comm();
  auto grad_comm = make_comm();
  Config c = Config::parse(model_text, "model.toml");
  Config m = c.section("model");
  auto model = build_model(m, kSample);
  model->init_params(42);
  SgdHyper h;
  h.momentum = 0.9f;
  Sgd sgd(model->arena_elements(), h, Device::cpu,
          step_owned_ranges(*model, options, stats_comm->size(), stats_comm->rank()));
  if (options.zero_stage > 0 && stats_comm->size() > 1)
    EXPECT_LT(sgd.state_elements(), model->arena_elements()) << "stage 1 keeps only a shard of the optimizer state";
  const std::int64_t b = kGlobalBatch / stats_comm->size();
  const std::int64_t micro = b / options.accumulation_steps;
  DistributedSampler sampler(kSamples, kGlobalBatch, stats_comm->size(), stats_comm->rank(), 3);
  DataParallelStep step(*model, sgd, *stats_comm, *grad_comm, micro, options, nullptr);
  Tensor xs[2] = {Tensor::empty(kSample.with_batch(b)), Tensor::empty(kSample.with_batch(b))};
  std::vector<std::int32_t> label_buffers[2] = {std::vector<std::int32_t>(static_cast<std::size_t>(b)),
                                                std::vector<std::int32_t>(static_cast<std::size_t>(b))};
  auto fill = [&](std::int64_t s) {  // step s's batch, into buffer s % 2
    const std::int64_t epoch = s / sampler.steps_per_epoch();
    if (epoch != sampler.epoch()) sampler.set_epoch(epoch);
    const auto idx = sampler.rank_batch(s % sampler.steps_per_epoch());
    Tensor& x = xs[s % 2];
    for (std::int64_t i = 0; i < b; ++i) fill_sample(idx[i], x.f32() + i * kSample.numel(), &label_buffers[s % 2][i]);
  };
  fill(0);
  for (std::int64_t s = 0; s < kSteps; ++s) {
    if (staging == Staging::none && s > 0) fill(s);
    if (staging != Staging::none && s + 1 < kSteps)
      step.set_upcoming([&, s] {
        fill(s + 1);
        step.stage_next(xs[(s + 1) % 2], label_buffers[(s + 1) % 2].data());
        if (staging == Staging::ahead_failing_once && s == kHookFails) throw DataError("injected loader failure");
      });
    else
      step.set_upcoming(nullptr);
    const StepInfo info{true, 1, s, stats_comm->rank()};
    if (staging == Staging::ahead_failing_once && s == kHookFails)  // the step itself completes, then it rethrows
      EXPECT_THROW(step.run(xs[s % 2], label_buffers[s % 2].data(), info, 0.05f), DataError);
    else
      step.run(xs[s % 2], label_buffers[s % 2].data(), info, 0.05f);
  }
  if (ZeroParameters* shards = step.parameter_shards()) {  // stage 3: the rank keeps only its shard
    const auto unit_per_bucket = static_cast<std::int64_t>(step.num_buckets()) * kShardUnit * 4;
    EXPECT_LE(shards->kept_bytes(), model->arena_elements() * 4 / stats_comm->size() + unit_per_bucket);
    shards->gather_all();
  }
  const float* p = model->params().f32();
  return std::vector<float>(p, p + model->arena_elements());
}

CommFactory world(AllreduceAlgo algo) {
  return [algo] { return make_mpi_communicator(test::context(), algo); };
}
CommFactory self(AllreduceAlgo algo) {
  return [algo] { return make_mpi_self_communicator(algo); };
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, ref = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    ref += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / ref);
}

class DataParallel : public ::testing::TestWithParam<std::tuple<const char*, AllreduceAlgo>> {};

TEST_P(DataParallel, WorldSizeDoesNotChangeTheResult) {
  const char* const model_text = std::get<0>(GetParam());  // a plain variable: clang 14 cannot
  const AllreduceAlgo algo = std::get<1>(GetParam());      // capture structured bindings
  const auto distributed = train(model_text, world(algo));
  const auto reference = train(model_text, self(algo));  // batch 128 in one process
  const auto initial = [&] {
    Config c = Config::parse(model_text, "model.toml");
    Config m = c.section("model");
    auto model = build_model(m, kSample);
    model->init_params(42);
    return std::vector<float>(model->params().f32(), model->params().f32() + model->arena_elements());
  }();
  EXPECT_GT(relative_difference(reference, initial), 1e-2) << "training did not move the parameters";
  EXPECT_LT(relative_difference(distributed, reference), 1e-5);
}

TEST_P(DataParallel, OverlappedAndPlainPathsAreBitwiseIdentical) {
  const auto [model_text, algo] = GetParam();
  StepOptions overlapped, plain;
  overlapped.bucket_mb = plain.bucket_mb = 1e-3;  // several buckets even for these small models
  overlapped.first_bucket_mb = plain.first_bucket_mb = 1e-3;
  plain.overlap = false;
  const auto a = train(model_text, world(algo), overlapped);
  const auto b = train(model_text, world(algo), plain);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

// The next batch staged from the step's hook is the batch the next step uses: bitwise the plain
// run; a hook that fails does so after the step's collectives and update, which stand.
TEST_P(DataParallel, StagingTheNextBatchAheadChangesNothing) {
  const auto [model_text, algo] = GetParam();
  const auto plain = train(model_text, world(algo));
  for (Staging staging : {Staging::ahead, Staging::ahead_failing_once}) {
    const auto ahead = train(model_text, world(algo), {}, staging);
    ASSERT_EQ(ahead.size(), plain.size());
    EXPECT_EQ(std::memcmp(ahead.data(), plain.data(), plain.size() * sizeof(float)), 0)
        << (staging == Staging::ahead ? "staged ahead" : "with the hook failing once");
  }
}

TEST_P(DataParallel, AccumulationEqualsOneLargerBatch) {
  const auto [model_text, algo] = GetParam();
  StepOptions accumulate;
  accumulate.accumulation_steps = 4;  // 4 micro-batches of 128 / (4 W)
  const auto a = train(model_text, world(algo), accumulate);
  const auto b = train(model_text, world(algo));
  EXPECT_LT(relative_difference(a, b), 1e-5);
  EXPECT_NE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "the two paths cannot be the same code";
}

TEST_P(DataParallel, ZeroStagesAreBitwiseStage0) {
  const auto [model_text, algo] = GetParam();
  StepOptions base;
  base.bucket_mb = base.first_bucket_mb = 1e-3;  // several buckets, each sharded over the ranks
  StepOptions plain = base, accumulate = base, clipped = base;
  plain.overlap = false;
  accumulate.accumulation_steps = 2;
  clipped.clip_grad_norm = 0.05;
  EXPECT_NE(train(model_text, world(algo), clipped), train(model_text, world(algo), base)) << "no step clipped";
  for (const StepOptions& stage0 : {base, plain, accumulate, clipped}) {
    const auto a = train(model_text, world(algo), stage0);
    for (int stage : {1, 2, 3}) {
      StepOptions sharded = stage0;
      sharded.zero_stage = stage;
      const auto b = train(model_text, world(algo), sharded);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << "stage " << stage << ", overlap " << stage0.overlap << ", accumulation " << stage0.accumulation_steps
          << ", clip " << stage0.clip_grad_norm << ": relative difference " << relative_difference(b, a);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, DataParallel,
                         ::testing::Combine(::testing::Values(kMlp, kCnn),
                                            ::testing::Values(AllreduceAlgo::ring, AllreduceAlgo::mpi)));

}  // namespace
}  // namespace ringtrain
