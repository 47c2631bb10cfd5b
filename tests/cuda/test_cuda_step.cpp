// The training step on the GPU (DataParallelStep, one rank): with train.cuda_graph the forward,
// loss and backward replayed from a CUDA graph give bitwise the parameters of the eager step
// (same kernels, same order), in f32 and bf16, for the MLP (dropout p = 0) and the CNN with
// batch norm of cuda_test_models.hpp; the eager GPU step stays within 1e-4 (L2, relative) of
// the CPU step after 12 SGD steps, also with 2 accumulated micro-batches, for the GPT on token
// batches, and in fp16 with dynamic loss scaling whose first steps overflow and are skipped on
// both alike; and with dropout p > 0, whose mask changes every step, the graph still equals the
// eager step. The step decided on the device equals the one decided on the host, the optimizer
// keeps the bf16/f16 compute copy exactly the rounded master, and ZeRO stages 1 and 2 equal
// stage 0 (stage 3 within float tolerance). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_test_models.hpp"
#include "cuda/cuda_test_support.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/grad_scaler.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/prune/pruner.hpp"
#include "support/prune_schedule.hpp"
#include "ringtrain/train/data_parallel_step.hpp"

namespace ringtrain {
namespace {

using test::bind_gpu;
using test::kCnn;
using test::kGpt;
using test::kGptPositions;
using test::kInput;
using test::kMlp;
using test::kMlpTwoHidden;
using test::kResidualCnn;
using test::l2_rel_error;

constexpr std::int64_t kBatch = 32, kSteps = 12;

struct Trained {
  std::vector<float> params;
  bool graphed = false;
  std::uint64_t replays = 0;
  std::string refused;
  std::int64_t skipped = 0;  // steps skipped for an fp16 overflow
  // bf16/f16 on the GPU: the compute copy's bits after the last step, before anything refreshed
  // it (what the fused optimizer wrote), and the master rounded by the host (empty otherwise)
  std::vector<std::uint16_t> compute_copy, master_rounded;
};

// The model's compute copy as the last step left it, and its master rounded to that dtype.
void read_compute_copy(Model& model, Trained& t) {
  const ComputeCopyOut copy = model.compute_copy();
  if (copy.data == nullptr) return;
  t.compute_copy.resize(t.params.size());
  CUDA_OK(cudaMemcpy(t.compute_copy.data(), copy.data, t.compute_copy.size() * sizeof(std::uint16_t),
                     cudaMemcpyDeviceToHost));
  for (float p : t.params) t.master_rounded.push_back(copy.dtype == DType::bf16 ? float_to_bf16(p) : float_to_f16(p));
}

// How a run of train() differs from the plain one.
struct TrainSetup {
  Shape input = kInput;                    // Shape{T}: token windows (a GPT)
  std::int64_t accumulation_steps = 1;     // micro-batches per step
  const LossScaleOptions* fp16 = nullptr;  // dynamic loss scaling (precision f16)
  const PruneConfig* prune = nullptr;      // a pruner after every step (its mask kernel after the update)
  bool adamw = false;                      // AdamW (bias corrections count the steps taken), not SGD
  double clip_grad_norm = 0.0;             // optim.clip_grad_norm
  bool phase_timing = false;               // monitor.phase_timing: the step decides on the host
  int zero_stage = 0;                      // train.zero_stage (one rank: the shard is everything)
  double bucket_mb = 0.0;                  // comm.bucket_mb and first_bucket_mb; 0: the defaults
};

// kSteps SGD-momentum (or AdamW) steps of one rank on deterministic batches (a new batch every step).
Trained train(const char* text, Device device, DType precision, bool cuda_graph, const TrainSetup& setup = {}) {
  Config c = Config::parse(text, "test.toml");
  Config m = c.has("model") ? c.section("model") : c;  // a GPT's keys are read in [model]
  auto model = build_model(m, setup.input, ComputeOptions{device, precision, false});
  model->init_params(7);
  StepOptions options;
  options.cuda_graph = cuda_graph;
  options.accumulation_steps = setup.accumulation_steps;
  options.clip_grad_norm = setup.clip_grad_norm;
  options.phase_timing = setup.phase_timing;
  options.zero_stage = setup.zero_stage;
  if (setup.bucket_mb > 0) options.bucket_mb = options.first_bucket_mb = setup.bucket_mb;
  const std::vector<ArenaRange> owned = step_owned_ranges(*model, options, 1, 0);
  SgdHyper h;
  h.momentum = 0.9f;
  Sgd sgd_optimizer(model->arena_elements(), h, device, owned);
  AdamW adamw(model->arena_elements(), AdamWHyper{}, device, owned);
  Optimizer& sgd = setup.adamw ? static_cast<Optimizer&>(adamw) : sgd_optimizer;
  auto stats = make_mpi_self_communicator(AllreduceAlgo::ring);
  auto grads = make_mpi_self_communicator(AllreduceAlgo::ring);
  GradScaler scaler = setup.fp16 != nullptr ? GradScaler(*setup.fp16) : GradScaler();
  DataParallelStep step(*model, sgd, *stats, *grads, kBatch / setup.accumulation_steps, options, nullptr,
                        setup.fp16 != nullptr ? &scaler : nullptr);
  std::unique_ptr<Pruner> pruner;
  if (setup.prune != nullptr) pruner = std::make_unique<Pruner>(*setup.prune, *model, sgd, *stats, kSteps);
  const bool tokens = model->input_dtype() == DType::i32;
  const std::int64_t classes = model->output_shape().dims().back(), positions = tokens ? setup.input[0] : 1;
  Tensor x = Tensor::empty(setup.input.with_batch(kBatch), tokens ? DType::i32 : DType::f32);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(kBatch * positions));
  for (std::int64_t s = 0; s < kSteps; ++s) {
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const double v = std::sin(0.013 * static_cast<double>(i) + 0.7 * static_cast<double>(s));
      if (tokens)
        x.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7 + s * 3) % classes);
      else
        x.f32()[i] = static_cast<float>(v);
    }
    for (std::size_t i = 0; i < labels.size(); ++i)
      labels[i] = static_cast<std::int32_t>((static_cast<std::int64_t>(i) * 3 + s) % classes);
    const StepResult r = step.run(x, labels.data(), StepInfo{true, 1, s, 0}, 0.05f);
    EXPECT_TRUE(std::isfinite(r.loss) || r.skipped) << "step " << s;
    if (pruner) pruner->after_step(s + 1);
  }
  Tensor host = Tensor::empty(model->params().shape());
  {
    const FullParameters full(*model);                // ZeRO stage 3: gathered into the arena
    copy_into(host, std::as_const(*model).params());  // const: reading it leaves the compute copy current
  }
  Trained t{std::vector<float>(host.f32(), host.f32() + host.numel()), step.graphed(), step.graph_replays(),
            step.graph_refused(), scaler.skipped_steps()};
  read_compute_copy(*model, t);
  return t;
}

void expect_graph_equals_eager(const char* text, DType precision) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  const Trained eager = train(text, Device::cuda, precision, false);
  const Trained graph = train(text, Device::cuda, precision, true);
  EXPECT_TRUE(graph.graphed) << "the capture failed (see the warning above)";
  // Two warm-up steps (the first allocates, which changes the key), then every step replays.
  EXPECT_GE(graph.replays, static_cast<std::uint64_t>(kSteps - 3)) << "the graph was not replayed";
  EXPECT_EQ(eager.replays, 0u);
  EXPECT_EQ(graph.refused, "");
  ASSERT_EQ(graph.params.size(), eager.params.size());
  EXPECT_EQ(std::memcmp(graph.params.data(), eager.params.data(), eager.params.size() * sizeof(float)), 0)
      << "L2 relative difference " << l2_rel_error(graph.params, eager.params);
}

TEST(CudaStep, MlpGraphEqualsEagerF32) { expect_graph_equals_eager(kMlp, DType::f32); }
TEST(CudaStep, MlpGraphEqualsEagerBf16) { expect_graph_equals_eager(kMlp, DType::bf16); }
TEST(CudaStep, CnnGraphEqualsEagerF32) { expect_graph_equals_eager(kCnn, DType::f32); }
TEST(CudaStep, CnnGraphEqualsEagerBf16) { expect_graph_equals_eager(kCnn, DType::bf16); }
TEST(CudaStep, MlpTwoHiddenGraphEqualsEagerBf16) { expect_graph_equals_eager(kMlpTwoHidden, DType::bf16); }
TEST(CudaStep, ResidualCnnGraphEqualsEagerBf16) { expect_graph_equals_eager(kResidualCnn, DType::bf16); }

TEST(CudaStep, EagerGpuStepMatchesCpuStep) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  for (const char* text : {kMlp, kCnn, kMlpTwoHidden, kResidualCnn}) {
    const Trained cpu = train(text, Device::cpu, DType::f32, false);
    const Trained gpu = train(text, Device::cuda, DType::f32, false);
    EXPECT_LT(l2_rel_error(gpu.params, cpu.params), 1e-4);
  }
}

TEST(CudaStep, EagerGpuStepMatchesCpuStepAccumulatingTwoMicroBatches) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  TrainSetup two;
  two.accumulation_steps = 2;
  for (const char* text : {kMlp, kCnn, kMlpTwoHidden, kResidualCnn}) {
    const Trained cpu = train(text, Device::cpu, DType::f32, false, two);
    const Trained gpu = train(text, Device::cuda, DType::f32, false, two);
    EXPECT_LT(l2_rel_error(gpu.params, cpu.params), 1e-4);
  }
}

// The GPT's CUDA layers in training: token batches uploaded as ids, a label per position.
TEST(CudaStep, EagerGpuGptStepMatchesCpuStep) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  TrainSetup gpt;
  gpt.input = Shape{kGptPositions};
  const Trained cpu = train(kGpt, Device::cpu, DType::f32, false, gpt);
  const Trained gpu = train(kGpt, Device::cuda, DType::f32, false, gpt);
  EXPECT_LT(l2_rel_error(gpu.params, cpu.params), 1e-4);
  const Trained graph = train(kGpt, Device::cuda, DType::f32, true, gpt);
  EXPECT_TRUE(graph.graphed) << graph.refused;
  EXPECT_EQ(std::memcmp(graph.params.data(), gpu.params.data(), gpu.params.size() * sizeof(float)), 0)
      << "L2 relative difference " << l2_rel_error(graph.params, gpu.params);
}

// fp16 loss scales far from the overflow threshold either way: a fixed 2^40 overflows f16 in
// every step, a (dynamic) 2^8 in none.
LossScaleOptions overflowing_scale() {
  LossScaleOptions o;
  o.init = 1099511627776.0;  // 2^40
  o.dynamic = false;
  return o;
}

LossScaleOptions fitting_scale() {
  LossScaleOptions o;
  o.init = 256.0;
  return o;
}

// fp16 end to end, with the scale far from the overflow threshold either way (so both sides
// decide alike): a fixed 2^40 overflows f16 in every step, which is skipped, leaving the initial
// parameters; a scale of 2^8 never overflows, and the GPU trains as the CPU's f16 emulation.
TEST(CudaStep, Fp16LossScalingSkipsAndTrainsAsTheCpu) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  const LossScaleOptions overflowing = overflowing_scale(), fitting = fitting_scale();
  for (const LossScaleOptions* scaling : {&overflowing, &fitting}) {
    TrainSetup fp16;
    fp16.fp16 = scaling;
    const Trained cpu = train(kMlp, Device::cpu, DType::f16, false, fp16);
    const Trained gpu = train(kMlp, Device::cuda, DType::f16, false, fp16);
    EXPECT_EQ(cpu.skipped, scaling == &overflowing ? kSteps : 0) << "scale " << scaling->init;
    EXPECT_EQ(gpu.skipped, cpu.skipped) << "scale " << scaling->init;
    EXPECT_LE(l2_rel_error(gpu.params, cpu.params), scaling == &overflowing ? 0.0 : 2e-2) << "scale " << scaling->init;
  }
}

// Pruning with the CUDA graph: the masks (recomputed at steps 3, 6 and 9) and the mask kernel after
// each update leave the graphed run's parameters bitwise those of the eager run, and the eager
// GPU run's masks those of the CPU run (the same weights fall below the threshold).
// A step decides on the device by default (the optimizer queued before the host waits) and on the
// host with monitor.phase_timing: the same statistics, the same decision, the same update bits,
// with AdamW (whose bias corrections count only the steps taken) and clipping, in f32 and in
// fp16 with every step skipped or none.
TEST(CudaStep, DecidingOnTheDeviceEqualsDecidingOnTheHost) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  const LossScaleOptions overflowing = overflowing_scale(), fitting = fitting_scale();
  const std::vector<const LossScaleOptions*> scalings{nullptr, &fitting, &overflowing};
  for (const LossScaleOptions* scaling : scalings) {
    SCOPED_TRACE(scaling == nullptr ? "f32" : "fp16 scale " + std::to_string(scaling->init));
    TrainSetup device;
    device.fp16 = scaling;
    device.adamw = true;
    device.clip_grad_norm = 0.05;
    TrainSetup host = device;
    host.phase_timing = true;
    const DType precision = scaling == nullptr ? DType::f32 : DType::f16;
    const Trained on_device = train(kMlp, Device::cuda, precision, false, device);
    const Trained on_host = train(kMlp, Device::cuda, precision, false, host);
    EXPECT_EQ(on_device.skipped, on_host.skipped);
    ASSERT_EQ(on_device.params.size(), on_host.params.size());
    EXPECT_EQ(std::memcmp(on_device.params.data(), on_host.params.data(), on_host.params.size() * sizeof(float)), 0)
        << "L2 relative difference " << l2_rel_error(on_device.params, on_host.params);
  }
}

// ZeRO stages 1 and 2 on the GPU at one rank: the gradient buckets reduce-scattered (the staging
// ring on the device for stage 2, its alignment pads zeroed and the shard copied there, the
// earlier micro-batch accumulated bucket by bucket), the optimizer stepping its shard ranges or
// the packed shard, the parameters allgathered and the bf16 compute copy refreshed from them:
// bitwise the stage 0 step decided on the host (the same adds and updates, element by element).
// Stage 3: the arena moved into reserved device memory, each bucket's layers computing on a
// gathered copy in a device pool buffer (in bf16 on a compute copy cast from it per group):
// within float tolerance of stage 0 (the same values, GEMMs on other addresses).
TEST(CudaStep, ZeroStagesEqualStageZero) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  for (const char* text : {kMlp, kCnn})
    for (const DType precision : {DType::f32, DType::bf16})
      for (const std::int64_t accumulation : {1, 2}) {
        TrainSetup setup;
        setup.adamw = true;
        setup.phase_timing = true;
        setup.accumulation_steps = accumulation;
        setup.bucket_mb = 0.001;  // a bucket per layer: stage 2's ring wraps
        const Trained stage0 = train(text, Device::cuda, precision, false, setup);
        for (const int stage : {1, 2, 3}) {
          SCOPED_TRACE(fmt::format("{} {} accumulation {} stage {}", text == kMlp ? "mlp" : "cnn",
                                   dtype_name(precision), accumulation, stage));
          setup.zero_stage = stage;
          const Trained sharded = train(text, Device::cuda, precision, false, setup);
          ASSERT_EQ(sharded.params.size(), stage0.params.size());
          if (stage == 3) {
            EXPECT_LT(l2_rel_error(sharded.params, stage0.params), 1e-6);
            continue;
          }
          EXPECT_EQ(std::memcmp(sharded.params.data(), stage0.params.data(), stage0.params.size() * sizeof(float)), 0)
              << "L2 relative difference " << l2_rel_error(sharded.params, stage0.params);
        }
      }
}

// ZeRO stage 3 on the GPT (its token table tied to the LM head, the tied gradient summed in row
// blocks whose buckets make one gathered group), f32 and bf16: within float tolerance of stage 0.
TEST(CudaStep, ZeroStageThreeGptEqualsStageZero) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  for (const DType precision : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(precision));
    TrainSetup gpt;
    gpt.input = Shape{kGptPositions};
    gpt.adamw = true;
    gpt.phase_timing = true;
    gpt.bucket_mb = 0.01;
    const Trained stage0 = train(kGpt, Device::cuda, precision, false, gpt);
    gpt.zero_stage = 3;
    const Trained stage3 = train(kGpt, Device::cuda, precision, false, gpt);
    ASSERT_EQ(stage3.params.size(), stage0.params.size());
    EXPECT_LT(l2_rel_error(stage3.params, stage0.params), 1e-6);
  }
}

// bf16 and f16 on the GPU: the fused optimizer writes the model's compute copy in its pass, so
// after each step, eager or graphed, the copy is exactly the master rounded, with no cast of
// its own (a missed write would leave the forward on stale weights).
TEST(CudaStep, TheOptimizerKeepsTheComputeCopyCurrent) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  for (const char* text : {kMlp, kCnn})
    for (DType precision : {DType::bf16, DType::f16})
      for (bool graph : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(precision)) + (graph ? " graphed" : " eager"));
        const Trained t = train(text, Device::cuda, precision, graph);
        ASSERT_EQ(t.compute_copy.size(), t.params.size());
        test::expect_same_bits(t.compute_copy, t.master_rounded);
      }
}

TEST(CudaStep, PruningWithTheGraphEqualsEagerAndTheCpu) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  const PruneConfig prune = test::gradual(0.5, 3, 9, 3);
  TrainSetup pruned;
  pruned.prune = &prune;
  const Trained cpu = train(kMlp, Device::cpu, DType::f32, false, pruned);
  const Trained eager = train(kMlp, Device::cuda, DType::f32, false, pruned);
  const Trained graph = train(kMlp, Device::cuda, DType::f32, true, pruned);
  EXPECT_TRUE(graph.graphed) << graph.refused;
  EXPECT_EQ(std::memcmp(graph.params.data(), eager.params.data(), eager.params.size() * sizeof(float)), 0)
      << "L2 relative difference " << l2_rel_error(graph.params, eager.params);
  std::int64_t zeros_cpu = 0, zeros_gpu = 0, differ = 0;
  for (std::size_t i = 0; i < cpu.params.size(); ++i) {
    zeros_cpu += cpu.params[i] == 0.0f;
    zeros_gpu += eager.params[i] == 0.0f;
    differ += (cpu.params[i] == 0.0f) != (eager.params[i] == 0.0f);
  }
  EXPECT_GT(zeros_cpu, static_cast<std::int64_t>(cpu.params.size() / 4)) << "half the weights should be pruned";
  EXPECT_EQ(differ, 0) << zeros_cpu << " zeros on the CPU, " << zeros_gpu << " on the GPU";
  EXPECT_LT(l2_rel_error(eager.params, cpu.params), 1e-4);
}

TEST(CudaStep, MlpWithDropoutGraphEqualsEager) {
  // A fresh mask every step: each replay must read the key begin_step stored for its step.
  std::string with_dropout = kMlp;
  with_dropout.replace(with_dropout.find("p = 0.0"), 7, "p = 0.25");
  expect_graph_equals_eager(with_dropout.c_str(), DType::f32);
}

}  // namespace
}  // namespace ringtrain
