// train.cuda_graph: read from [train] (default off, a non-boolean value is a ConfigError naming
// the key), and on a CPU model the step refuses a graph with the reason and trains exactly as
// without the option. comm.allreduce = auto (the default) resolved on the host, without a GPU:
// NCCL only for a job of several ranks all on GPUs in a build with NCCL; comm.bucket_mb's default
// where the gradients go to a device-memory (NCCL) communicator. monitor.phase_timing: read (default
// off) and passed to the step, which trains the same with it. train.zero_stage: range-checked when
// the optimizer's ranges are asked for.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/train/data_parallel_step.hpp"
#include "ringtrain/train/run_comms.hpp"
#include "ringtrain/train/train_config.hpp"
#include "support/test_context.hpp"

namespace ringtrain {
namespace {

TrainConfig read(const std::string& train_section, const std::string& more_sections = "") {
  Config c =
      Config::parse("[data]\ntrain = \"t.h5\"\n[train]\n" + train_section + "\n" + more_sections + "\n", "run.toml");
  return read_train_config(c, "run");
}

TEST(CudaGraphOption, DefaultsOffAndReadsABoolean) {
  EXPECT_FALSE(read("").cuda_graph);
  EXPECT_TRUE(read("cuda_graph = true").cuda_graph);
  try {
    read("cuda_graph = \"yes\"");
    ADD_FAILURE() << "accepted a string";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda_graph"), std::string::npos) << e.what();
  }
}

TEST(PhaseTimingOption, DefaultsOffAndReachesTheStep) {
  auto host = make_mpi_self_communicator(AllreduceAlgo::ring);
  EXPECT_FALSE(read("").phase_timing);
  EXPECT_FALSE(step_options(read(""), test::context(), *host).phase_timing);
  const TrainConfig timed = read("", "[monitor]\nphase_timing = true");
  EXPECT_TRUE(timed.phase_timing);
  EXPECT_TRUE(step_options(timed, test::context(), *host).phase_timing);
  EXPECT_THROW(read("", "[monitor]\nphase_timing = 1"), ConfigError);
}

std::vector<float> train_mlp(bool cuda_graph, std::string* refused, bool phase_timing = false) {
  Config c = Config::parse("[[layers]]\ntype = \"flatten\"\n[[layers]]\ntype = \"linear\"\nout = 10\n", "m.toml");
  const Shape sample{1, 4, 4};
  auto model = build_model(c, sample);
  model->init_params(3);
  Sgd sgd(model->arena_elements(), SgdHyper{});
  auto stats = make_mpi_self_communicator(AllreduceAlgo::ring);
  auto grads = make_mpi_self_communicator(AllreduceAlgo::ring);
  StepOptions options;
  options.cuda_graph = cuda_graph;
  options.phase_timing = phase_timing;
  DataParallelStep step(*model, sgd, *stats, *grads, 8, options, nullptr);
  EXPECT_FALSE(step.graphed());
  *refused = step.graph_refused();
  Tensor x = Tensor::empty(sample.with_batch(8));
  std::vector<std::int32_t> labels(8);
  for (std::int64_t s = 0; s < 5; ++s) {
    for (std::int64_t i = 0; i < x.numel(); ++i)
      x.f32()[i] = static_cast<float>(std::cos(0.1 * static_cast<double>(i + s)));
    for (std::int64_t i = 0; i < 8; ++i) labels[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i + s) % 10);
    step.run(x, labels.data(), StepInfo{true, 1, s, 0}, 0.1f);
  }
  return std::vector<float>(model->params().f32(), model->params().f32() + model->arena_elements());
}

TEST(CudaGraphOption, ACpuModelIsRefusedAndTrainsAsWithout) {
  std::string with_reason, without_reason;
  const auto with = train_mlp(true, &with_reason);
  const auto without = train_mlp(false, &without_reason);
  EXPECT_EQ(with_reason, "the model is not on a GPU");
  EXPECT_EQ(without_reason, "");
  ASSERT_EQ(with.size(), without.size());
  EXPECT_EQ(std::memcmp(with.data(), without.data(), with.size() * sizeof(float)), 0);
}

// train.zero_stage is checked where the set-up first needs it, the optimizer's ranges (before a
// checkpoint is resumed into a sharded layout): out of range is a ConfigError naming the key;
// every stage runs on the CPU (and on a GPU model: test_cuda_step's).
TEST(ZeroStageOption, CheckedWhenTheOptimizerRangesAreAskedFor) {
  Config c = Config::parse("[[layers]]\ntype = \"flatten\"\n[[layers]]\ntype = \"linear\"\nout = 10\n", "m.toml");
  auto model = build_model(c, Shape{1, 4, 4});
  for (const int stage : {-1, 4}) {
    StepOptions options;
    options.zero_stage = stage;
    try {
      step_owned_ranges(*model, options, 2, 0);
      ADD_FAILURE() << "accepted train.zero_stage = " << stage;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("train.zero_stage"), std::string::npos) << e.what();
    }
  }
  for (const int stage : {0, 1, 2, 3}) {
    StepOptions options;
    options.zero_stage = stage;
    EXPECT_FALSE(step_owned_ranges(*model, options, 2, 0).empty()) << "stage " << stage;
  }
}

TEST(PhaseTimingOption, TheCpuTrainsExactlyAsWithout) {
  std::string reason;
  const auto timed = train_mlp(false, &reason, true);
  const auto plain = train_mlp(false, &reason, false);
  ASSERT_EQ(timed.size(), plain.size());
  EXPECT_EQ(std::memcmp(timed.data(), plain.data(), timed.size() * sizeof(float)), 0);
}

TEST(GradientAllreduceOption, AutoIsNcclOnlyForSeveralRanksAllOnGpusWithNcclBuilt) {
  EXPECT_EQ(read("").allreduce, GradientAllreduce::automatic);
  EXPECT_EQ(read("", "[comm]\nallreduce = \"auto\"").allreduce, GradientAllreduce::automatic);
  EXPECT_EQ(allreduce_name(GradientAllreduce::automatic), "auto");
  constexpr auto automatic = GradientAllreduce::automatic, nccl = GradientAllreduce::nccl,
                 ring = GradientAllreduce::ring, mpi = GradientAllreduce::mpi;
  // requested, ranks on a GPU, world, NCCL built -> the gradients' path
  EXPECT_EQ(gradient_allreduce(automatic, 4, 4, true), nccl);
  EXPECT_EQ(gradient_allreduce(automatic, 3, 4, true), ring);   // one rank fell back to the CPU
  EXPECT_EQ(gradient_allreduce(automatic, 4, 4, false), ring);  // a build without NCCL
  EXPECT_EQ(gradient_allreduce(automatic, 1, 1, true), ring);   // a world of one communicates nothing
  EXPECT_EQ(gradient_allreduce(automatic, 0, 2, true), ring);
  EXPECT_EQ(gradient_allreduce(nccl, 2, 2, false), nccl);  // asked for: a build without it says so
  EXPECT_EQ(gradient_allreduce(nccl, 1, 1, true), nccl);
  EXPECT_EQ(gradient_allreduce(nccl, 1, 2, true), ring);  // not every rank on a GPU: the ring, warned
  EXPECT_EQ(gradient_allreduce(mpi, 2, 2, true), mpi);
  EXPECT_EQ(gradient_allreduce(ring, 2, 2, true), ring);
}

// A communicator that takes device memory, as NCCL's does (never asked to communicate here).
class DeviceMemoryComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string_view name() const override { return "device-memory"; }
  bool device_memory() const override { return true; }
  void allreduce_sum(void* /*data*/, std::size_t /*count*/, DType /*dtype*/) override {}
  void broadcast(void* /*data*/, std::size_t /*bytes*/, int /*root*/) override {}
  void barrier() override {}
};

TEST(GradientAllreduceOption, NcclBucketsDefaultToTwentyFiveMegabytesUnlessGiven) {
  const DeviceMemoryComm device;
  auto host = make_mpi_self_communicator(AllreduceAlgo::ring);
  EXPECT_EQ(step_options(read(""), test::context(), *host).bucket_mb, 1.0);
  EXPECT_EQ(step_options(read(""), test::context(), device).bucket_mb, kNcclBucketMb);
  EXPECT_EQ(step_options(read("", "[comm]\nbucket_mb = 4"), test::context(), device).bucket_mb, 4.0);
  EXPECT_EQ(step_options(read("", "[comm]\nbucket_mb = 1"), test::context(), device).bucket_mb, 1.0);
  EXPECT_EQ(step_options(read("", "[comm]\nbucket_mb = 4"), test::context(), *host).bucket_mb, 4.0);
}

}  // namespace
}  // namespace ringtrain
