// ringtrain's C++ API in one program: a model built from a TOML description, SGD, and
// DataParallelStep (the gradients ring-allreduced over every MPI rank) trained for a few steps
// on synthetic data. Rank 0 prints the loss, then PASS if it fell to under half (exit 1 if not).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/version.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/runtime/context.hpp"
#include "ringtrain/train/data_parallel_step.hpp"

namespace rt = ringtrain;

constexpr std::int64_t kFeatures = 16, kClasses = 4, kBatch = 32, kSteps = 30;  // kBatch: per rank
constexpr std::uint64_t kSeed = 1;

const char* kModel = R"(
[[model.layers]]
type = "linear"
out = 32
[[model.layers]]
type = "relu"
[[model.layers]]
type = "linear"
out = 4
)";

// This rank's part of global batch `step`: sample i has class i % kClasses, and its features
// are that class's one-hot pattern plus a deterministic disturbance.
void fill_batch(std::int64_t step, const rt::Context& ctx, float* x, std::int32_t* labels) {
  for (std::int64_t i = 0; i < kBatch; ++i) {
    const std::int64_t index = (step * ctx.world_size() + ctx.world_rank()) * kBatch + i;
    labels[i] = static_cast<std::int32_t>(index % kClasses);
    for (std::int64_t j = 0; j < kFeatures; ++j)
      x[i * kFeatures + j] = (j % kClasses == labels[i] ? 1.0f : 0.0f) +
                             0.3f * static_cast<float>(std::sin(0.7 * static_cast<double>(index) + 1.3 * j));
  }
}

int main(int argc, char** argv) {
  rt::Context ctx(&argc, &argv);  // MPI, finalized when it goes out of scope
  ctx.bind(rt::Device::cpu, 0);   // this rank's share of the node's cores

  rt::Config config = rt::Config::parse(kModel, "cpp_api.toml");
  rt::Config model_config = config.section("model");
  auto model = rt::build_model(model_config, rt::Shape{kFeatures});
  model->init_params(kSeed);  // the same initial parameters on every rank
  rt::SgdHyper hyper;
  hyper.momentum = 0.9f;
  rt::Sgd sgd(model->arena_elements(), hyper);

  // One communicator for the loss and accuracy, one for the gradient buckets.
  auto stats_comm = rt::make_mpi_communicator(ctx, rt::AllreduceAlgo::ring);
  auto grad_comm = rt::make_mpi_communicator(ctx, rt::AllreduceAlgo::ring);
  rt::DataParallelStep step(*model, sgd, *stats_comm, *grad_comm, kBatch, rt::StepOptions{}, nullptr);

  rt::Tensor x = rt::Tensor::empty(rt::Shape{kFeatures}.with_batch(kBatch));
  std::vector<std::int32_t> labels(kBatch);
  double first = 0.0, last = 0.0;
  for (std::int64_t s = 0; s < kSteps; ++s) {
    fill_batch(s, ctx, x.f32(), labels.data());
    const rt::StepResult r = step.run(x, labels.data(), rt::StepInfo{true, kSeed, s, ctx.world_rank()}, 0.05f);
    if (s == 0) first = r.loss;
    last = r.loss;  // the mean over the global batch: the same on every rank
    if (ctx.world_rank() == 0 && (s % 5 == 0 || s == kSteps - 1))
      std::printf("step %2lld  loss %.4f  accuracy %.2f\n", static_cast<long long>(s), r.loss,
                  r.correct / static_cast<double>(kBatch * ctx.world_size()));
  }
  const bool pass = last < 0.5 * first;
  if (ctx.world_rank() == 0)
    std::printf("%s: ringtrain %s, %d rank(s), %lld parameters, loss %.4f -> %.4f\n", pass ? "PASS" : "FAIL",
                rt::version(), ctx.world_size(), static_cast<long long>(model->num_params()), first, last);
  return pass ? 0 : 1;
}
