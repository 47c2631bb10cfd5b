// Pruning on the GPU against the CPU pruner (the reference): the same MLP (same seed, so the same
// initial parameters) and the same gradients each step, each model trained and pruned on its own
// (the GPU's parameters never copied into the CPU model, so the masks are two computations); after
// a few steps with mask updates the masks must be equal and the pruned parameters and optimizer
// state exactly 0 on both, the rest within f32 tolerance. (An update rounded differently on the
// device moves a weight across the threshold only if two magnitudes sit within an ulp of it;
// neighbouring magnitudes of these thousand random weights are some 10^4 ulps apart.) Also a mask written from outside
// (resume) reaching the device. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_test_models.hpp"
#include "cuda/cuda_test_support.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/prune/pruner.hpp"
#include "support/prune_schedule.hpp"

namespace ringtrain {
namespace {

using test::bind_gpu;

constexpr const char* kMlp = R"(
[[layers]]
type = "linear"
out = 32
[[layers]]
type = "relu"
[[layers]]
type = "linear"
out = 16
[[layers]]
type = "relu"
[[layers]]
type = "linear"
out = 4
)";

const Shape kInput{12};

std::unique_ptr<Model> make(Device device) {
  Config c = Config::parse(kMlp, "test.toml");
  auto model = build_model(c, kInput, ComputeOptions{device, DType::f32, false});
  model->init_params(21);
  return model;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::int64_t n, Device device) {
  if (name == "adamw") return std::make_unique<AdamW>(n, AdamWHyper{}, device);
  SgdHyper h;
  h.momentum = 0.9f;
  return std::make_unique<Sgd>(n, h, device);
}

std::vector<float> host_values(const Tensor& t) {
  const Tensor h = to_host(t);
  return {h.f32(), h.f32() + h.numel()};
}

// Where mask is 0, ref and got are exactly 0; the rest within f32 tolerance.
void expect_pruned_alike(const std::vector<float>& got, const std::vector<float>& ref, const std::vector<float>& mask,
                         const char* what) {
  ASSERT_EQ(got.size(), mask.size());
  ASSERT_EQ(ref.size(), mask.size());
  std::int64_t nonzero_masked = 0;
  for (std::size_t i = 0; i < mask.size(); ++i)
    if (mask[i] == 0.0f && (got[i] != 0.0f || ref[i] != 0.0f)) ++nonzero_masked;
  EXPECT_EQ(nonzero_masked, 0) << what << ": masked elements not 0";
  EXPECT_LT(test::max_rel_error(got, ref), test::kTolF32) << what;
}

// Runs `steps` optimizer steps with the same random gradients on a CPU and a GPU model, each
// followed by its own pruner, and compares masks, parameters and state.
void compare_pruning(const PruneConfig& config, const std::string& optimizer, std::int64_t steps) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  auto cpu = make(Device::cpu);
  auto gpu = make(Device::cuda);
  const std::int64_t n = cpu->arena_elements();
  test::expect_same_bits(host_values(gpu->params()), host_values(cpu->params()));
  auto cpu_opt = make_optimizer(optimizer, n, Device::cpu);
  auto gpu_opt = make_optimizer(optimizer, n, Device::cuda);
  auto comm = make_mpi_self_communicator(AllreduceAlgo::mpi);
  Pruner cpu_pruner(config, *cpu, *cpu_opt, *comm, steps);
  Pruner gpu_pruner(config, *gpu, *gpu_opt, *comm, steps);
  Rng rng(stream_key(17));
  for (std::int64_t step = 1; step <= steps; ++step) {
    float* g = cpu->grads().f32();
    for (std::int64_t i = 0; i < n; ++i) g[i] = rng.uniform() - 0.5f;
    copy_into(gpu->grads(), cpu->grads());
    cpu_opt->step(cpu->params().f32(), cpu->grads().f32(), n, 0.05f);
    gpu_opt->step(gpu->params().f32(), gpu->grads().f32(), n, 0.05f);
    cpu_pruner.after_step(step);
    gpu_pruner.after_step(step);
  }
  const std::vector<float> mask = host_values(cpu_pruner.mask());
  ASSERT_EQ(gpu_pruner.mask().device(), Device::cpu);
  test::expect_same_bits(host_values(gpu_pruner.mask()), mask);
  EXPECT_GT(std::count(mask.begin(), mask.end(), 0.0f), 0) << "nothing was pruned";
  expect_pruned_alike(host_values(gpu->params()), host_values(cpu->params()), mask, "parameters");
  const auto cpu_state = cpu_opt->state(), gpu_state = gpu_opt->state();
  ASSERT_EQ(gpu_state.size(), cpu_state.size());
  for (std::size_t b = 0; b < cpu_state.size(); ++b) {
    ASSERT_EQ(gpu_state[b].tensor.device(), Device::cuda);
    expect_pruned_alike(host_values(gpu_state[b].tensor), host_values(cpu_state[b].tensor), mask,
                        cpu_state[b].name.c_str());
  }
  const auto cpu_report = cpu_pruner.report(), gpu_report = gpu_pruner.report();
  ASSERT_EQ(gpu_report.size(), cpu_report.size());
  for (std::size_t l = 0; l < cpu_report.size(); ++l) {
    EXPECT_EQ(gpu_report[l].zeros, cpu_report[l].zeros) << "layer " << cpu_report[l].layer;
    EXPECT_EQ(gpu_report[l].neurons_pruned, cpu_report[l].neurons_pruned) << "layer " << cpu_report[l].layer;
  }
}

using test::gradual;

TEST(CudaPruner, GlobalGradualWithMomentumMatchesCpu) {
  PruneConfig c = gradual(0.7, 2, 4, 1);  // mask updates after steps 2, 3 and 4
  c.scope = PruneScope::global;
  compare_pruning(c, "sgd", 6);
}

TEST(CudaPruner, PerLayerOneShotWithAdamWMatchesCpu) { compare_pruning(gradual(0.5, 3, 3, 1), "adamw", 5); }

TEST(CudaPruner, StructuredWithAdamWMatchesCpu) {
  PruneConfig c = gradual(0.5, 2, 3, 1);
  c.structured = true;
  compare_pruning(c, "adamw", 5);
}

TEST(CudaPruner, AppliesAMaskWrittenFromOutside) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  auto gpu = make(Device::cuda);
  const std::int64_t n = gpu->arena_elements();
  auto opt = make_optimizer("sgd", n, Device::cuda);
  auto comm = make_mpi_self_communicator(AllreduceAlgo::mpi);
  Pruner pruner(gradual(0.5, 100, 200, 10), *gpu, *opt, *comm, 300);  // no update in this test
  const ArenaRange first = pruner.masked_ranges().front();
  std::vector<std::int64_t> written;
  for (std::int64_t i = first.offset; i < first.offset + first.count; i += 3) {
    pruner.mask().f32()[i] = 0.0f;
    written.push_back(i);
  }
  pruner.mask_written();  // as the trainer does after a resume
  std::vector<float> g(static_cast<std::size_t>(n), 0.25f);
  copy_into(gpu->grads(), Tensor::wrap(g.data(), Shape{n}));
  opt->step(gpu->params().f32(), gpu->grads().f32(), n, 0.05f);
  pruner.after_step(1);
  const std::vector<float> p = host_values(gpu->params()), v = host_values(opt->state()[0].tensor);
  for (std::int64_t i : written) {
    EXPECT_EQ(p[static_cast<std::size_t>(i)], 0.0f) << "parameter " << i;
    EXPECT_EQ(v[static_cast<std::size_t>(i)], 0.0f) << "velocity " << i;
  }
  EXPECT_NE(v[static_cast<std::size_t>(first.offset + 1)], 0.0f) << "an element kept by the mask was zeroed";
}

}  // namespace
}  // namespace ringtrain
