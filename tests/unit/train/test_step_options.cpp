// train.cuda_graph: read from [train] (default off, a non-boolean value is a ConfigError naming
// the key), and on a CPU model the step refuses a graph with the reason and trains exactly as
// without the option.
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
#include "ringtrain/train/train_config.hpp"

namespace ringtrain {
namespace {

TrainConfig read(const std::string& train_section) {
  Config c = Config::parse("[data]\ntrain = \"t.h5\"\n[train]\n" + train_section + "\n", "run.toml");
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

std::vector<float> train_mlp(bool cuda_graph, std::string* refused) {
  Config c = Config::parse("[[layers]]\ntype = \"flatten\"\n[[layers]]\ntype = \"linear\"\nout = 10\n", "m.toml");
  const Shape sample{1, 4, 4};
  auto model = build_model(c, sample);
  model->init_params(3);
  Sgd sgd(model->num_params(), SgdHyper{});
  auto stats = make_mpi_self_communicator(AllreduceAlgo::ring);
  auto grads = make_mpi_self_communicator(AllreduceAlgo::ring);
  StepOptions options;
  options.cuda_graph = cuda_graph;
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
  return std::vector<float>(model->params().f32(), model->params().f32() + model->num_params());
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

}  // namespace
}  // namespace ringtrain
