// Magnitude pruning: schedule values, exactly round(s * n) weights pruned, per-layer vs global
// thresholds, deterministic ties, masks that keep pruned weights and their momentum at exactly
// 0 through optimizer steps, the ranges the mask is applied to, a mask written from outside (a
// resume) applied from then on, shrunk MLPs that compute the same logits, config errors by key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/prune/pruner.hpp"
#include "support/prune_schedule.hpp"

namespace ringtrain {
namespace {

using test::gradual;

TEST(PruneSchedule, CubicRampFromStartToEnd) {
  const PruneConfig c = gradual(0.8, 100, 400, 100);
  EXPECT_EQ(scheduled_sparsity(c, 0), 0.0);
  EXPECT_EQ(scheduled_sparsity(c, 100), 0.0);
  EXPECT_NEAR(scheduled_sparsity(c, 200), 0.8 * (1.0 - 8.0 / 27.0), 1e-12);
  EXPECT_NEAR(scheduled_sparsity(c, 300), 0.8 * (1.0 - 1.0 / 27.0), 1e-12);
  EXPECT_EQ(scheduled_sparsity(c, 400), 0.8);
  EXPECT_EQ(scheduled_sparsity(c, 10000), 0.8);
  std::vector<std::int64_t> updates;
  for (std::int64_t t = 0; t <= 1000; ++t)
    if (is_mask_update_step(c, t)) updates.push_back(t);
  EXPECT_EQ(updates, (std::vector<std::int64_t>{100, 200, 300, 400}));
  const PruneConfig off_grid = gradual(0.5, 0, 250, 100);
  updates.clear();
  for (std::int64_t t = 0; t <= 1000; ++t)
    if (is_mask_update_step(off_grid, t)) updates.push_back(t);
  EXPECT_EQ(updates, (std::vector<std::int64_t>{0, 100, 200, 250}));
}

TEST(PruneSchedule, OneShotJumpsToTheTarget) {
  const PruneConfig c = gradual(0.6, 50, 50, 10);
  EXPECT_EQ(scheduled_sparsity(c, 49), 0.0);
  EXPECT_EQ(scheduled_sparsity(c, 50), 0.6);
  EXPECT_FALSE(is_mask_update_step(c, 40));
  EXPECT_TRUE(is_mask_update_step(c, 50));
  EXPECT_FALSE(is_mask_update_step(c, 60));
}

TEST(MagnitudeMask, PrunesExactlyRoundedCountOfSmallest) {
  Rng rng(stream_key(7));
  std::vector<float> w(1001), mask(1001, 1.0f);
  for (float& v : w) v = 2.0f * rng.uniform() - 1.0f;
  mask_smallest_magnitudes(w.data(), mask.data(), {{0, 1001}}, 0.37);
  const auto pruned = std::count(mask.begin(), mask.end(), 0.0f);
  EXPECT_EQ(pruned, std::llround(0.37 * 1001));
  float largest_pruned = 0.0f, smallest_kept = 2.0f;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (mask[i] == 0.0f)
      largest_pruned = std::max(largest_pruned, std::fabs(w[i]));
    else
      smallest_kept = std::min(smallest_kept, std::fabs(w[i]));
  }
  EXPECT_LE(largest_pruned, smallest_kept);
}

TEST(MagnitudeMask, TiesGoToMaskedThenLowerPosition) {
  std::vector<float> w(10, 1.0f), mask(10, 1.0f);
  w[3] = -1.0f;  // the same magnitude
  mask_smallest_magnitudes(w.data(), mask.data(), {{0, 10}}, 0.5);
  EXPECT_EQ(mask, (std::vector<float>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1}));
  // All zero (as after pruning): the elements masked before stay masked.
  std::vector<float> zeros(10, 0.0f), previous(10, 1.0f);
  previous[7] = previous[8] = 0.0f;
  mask_smallest_magnitudes(zeros.data(), previous.data(), {{0, 10}}, 0.2);
  EXPECT_EQ(previous, (std::vector<float>{1, 1, 1, 1, 1, 1, 1, 0, 0, 1}));
}

TEST(MagnitudeMask, PerLayerAndGlobalThresholdsDiffer) {
  // Layer A (elements 0-99) is ten times smaller than layer B (100-199).
  std::vector<float> w(200);
  for (int i = 0; i < 100; ++i) {
    w[static_cast<std::size_t>(i)] = 0.001f * static_cast<float>(i + 1);
    w[static_cast<std::size_t>(100 + i)] = 0.1f + 0.001f * static_cast<float>(i);
  }
  const std::vector<ArenaRange> a{{0, 100}}, b{{100, 100}};
  std::vector<float> per_layer(200, 1.0f), global(200, 1.0f);
  mask_smallest_magnitudes(w.data(), per_layer.data(), a, 0.5);
  mask_smallest_magnitudes(w.data(), per_layer.data(), b, 0.5);
  mask_smallest_magnitudes(w.data(), global.data(), {a[0], b[0]}, 0.5);
  EXPECT_EQ(std::count(per_layer.begin(), per_layer.begin() + 100, 0.0f), 50);
  EXPECT_EQ(std::count(per_layer.begin() + 100, per_layer.end(), 0.0f), 50);
  EXPECT_EQ(std::count(global.begin(), global.begin() + 100, 0.0f), 100);
  EXPECT_EQ(std::count(global.begin() + 100, global.end(), 0.0f), 0);
}

TEST(NeuronMask, MasksRowsOfSmallestNormWithTheirBias) {
  // 4 neurons x 2 inputs, then 4 biases; row norms 5, 1, 3, 2.
  std::vector<float> p = {3, 4, 1, 0, 0, 3, 2, 0, 9, 9, 9, 9};
  std::vector<float> mask(p.size(), 1.0f);
  mask_smallest_neurons(p.data(), mask.data(), NeuronRange{0, 4, 2, 8}, 0.5);
  EXPECT_EQ(mask, (std::vector<float>{1, 1, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0}));
}

std::unique_ptr<Model> mlp(const std::string& widths_toml) {
  Config config = Config::parse(widths_toml, "test");
  Config model = config.section("model");
  return build_model(model, Shape{6});
}

const char* kMlp = R"([[model.layers]]
type = "linear"
out = 8
[[model.layers]]
type = "relu"
[[model.layers]]
type = "linear"
out = 5
[[model.layers]]
type = "relu"
[[model.layers]]
type = "linear"
out = 3
)";

TEST(Pruner, PrunedWeightsAndMomentumStayExactlyZeroThroughSteps) {
  auto model = mlp(kMlp);
  model->init_params(3);
  SgdHyper h;
  h.momentum = 0.9f;
  Sgd sgd(model->arena_elements(), h);
  auto comm = make_mpi_self_communicator(AllreduceAlgo::mpi);
  Pruner pruner(gradual(0.5, 2, 2, 1), *model, sgd, *comm, 10);
  Rng rng(stream_key(11));
  float* g = model->grads().f32();
  for (std::int64_t step = 1; step <= 6; ++step) {
    for (std::int64_t i = 0; i < model->arena_elements(); ++i) g[i] = rng.uniform() - 0.5f;
    sgd.step(model->params().f32(), g, model->arena_elements(), 0.1f);
    pruner.after_step(step);
  }
  const float* p = model->params().f32();
  const float* m = pruner.mask().f32();
  const float* v = sgd.state()[0].tensor.f32();
  for (const auto& t : model->param_tensors()) {
    const auto masked = std::count(m + t.offset, m + t.offset + t.shape.numel(), 0.0f);
    EXPECT_EQ(masked, t.name == "weight" ? std::llround(0.5 * static_cast<double>(t.shape.numel())) : 0)
        << "layer " << t.layer << " " << t.name;
  }
  for (std::int64_t i = 0; i < model->arena_elements(); ++i)
    if (m[i] == 0.0f) {
      EXPECT_EQ(p[i], 0.0f);
      EXPECT_EQ(v[i], 0.0f);
    }
  for (const LayerSparsity& s : pruner.report()) EXPECT_EQ(s.zeros, std::llround(0.5 * static_cast<double>(s.weights)));
}

TEST(Pruner, MaskedRangesAreTheWeightsAndStructuredBiases) {
  auto model = mlp(kMlp);
  Sgd sgd(model->arena_elements(), SgdHyper{});
  auto comm = make_mpi_self_communicator(AllreduceAlgo::mpi);
  std::vector<std::pair<std::int64_t, std::int64_t>> weights, structured;
  for (const auto& t : model->param_tensors()) {
    if (t.name == "weight") weights.emplace_back(t.offset, t.shape.numel());
    if (t.layer != 4) structured.emplace_back(t.offset, t.shape.numel());  // not the output layer
  }
  auto as_pairs = [](const std::vector<ArenaRange>& ranges) {
    std::vector<std::pair<std::int64_t, std::int64_t>> out;
    for (const ArenaRange& r : ranges) out.emplace_back(r.offset, r.count);
    return out;
  };
  Pruner unstructured(gradual(0.5, 1, 1, 1), *model, sgd, *comm, 1);
  EXPECT_EQ(as_pairs(unstructured.masked_ranges()), weights);
  PruneConfig c = gradual(0.5, 1, 1, 1);
  c.structured = true;
  Pruner neurons(c, *model, sgd, *comm, 1);
  EXPECT_EQ(as_pairs(neurons.masked_ranges()), structured);
}

TEST(Pruner, AppliesAMaskWrittenFromOutsideWithinItsRanges) {
  // As on resume: the checkpoint writes mask() before any update of this run's schedule.
  auto model = mlp(kMlp);
  model->init_params(9);
  SgdHyper h;
  h.momentum = 0.9f;
  Sgd sgd(model->arena_elements(), h);
  auto comm = make_mpi_self_communicator(AllreduceAlgo::mpi);
  Pruner pruner(gradual(0.5, 100, 200, 10), *model, sgd, *comm, 300);
  const auto tensors = model->param_tensors();
  const std::int64_t weight = tensors[0].offset + 3, bias = tensors[1].offset + 2;
  ASSERT_EQ(tensors[1].name, "bias");
  pruner.mask().f32()[weight] = 0.0f;
  pruner.mask().f32()[bias] = 0.0f;  // outside the masked ranges (unstructured): never applied
  pruner.mask_written();
  std::fill_n(model->grads().f32(), model->arena_elements(), 0.25f);
  sgd.step(model->params().f32(), model->grads().f32(), model->arena_elements(), 0.1f);
  pruner.after_step(1);
  EXPECT_EQ(model->params().f32()[weight], 0.0f);
  EXPECT_EQ(sgd.state()[0].tensor.f32()[weight], 0.0f);
  EXPECT_NE(model->params().f32()[bias], 0.0f);
  EXPECT_NE(sgd.state()[0].tensor.f32()[bias], 0.0f);
  EXPECT_NE(model->params().f32()[weight + 1], 0.0f);
}

TEST(Pruner, StructuredSkipsTheOutputLayerAndShrinksToTheSameFunction) {
  auto dense = mlp(kMlp);
  dense->init_params(5);
  Sgd sgd(dense->arena_elements(), SgdHyper{});
  auto comm = make_mpi_self_communicator(AllreduceAlgo::mpi);
  PruneConfig c = gradual(0.5, 1, 1, 1);
  c.structured = true;
  Pruner pruner(c, *dense, sgd, *comm, 1);
  pruner.after_step(1);
  const std::vector<std::int64_t> kept = kept_neurons_per_linear(*dense, pruner.mask().f32());
  EXPECT_EQ(kept, (std::vector<std::int64_t>{4, 2, 3}));  // round(0.5 * 5) = 3 of 5 pruned
  std::string toml = kMlp;
  toml.replace(toml.find("out = 8"), 7, "out = 4");
  toml.replace(toml.find("out = 5"), 7, "out = 2");
  auto shrunk = mlp(toml);
  copy_kept_neurons(*dense, pruner.mask().f32(), *shrunk);
  Tensor x = Tensor::empty(Shape{4, 6});
  Rng rng(stream_key(13));
  for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 2.0f * rng.uniform() - 1.0f;
  StepInfo eval;
  eval.training = false;
  const Tensor a = dense->forward(x, eval);
  const Tensor& b = shrunk->forward(x, eval);
  for (std::int64_t i = 0; i < a.numel(); ++i) EXPECT_NEAR(a.f32()[i], b.f32()[i], 1e-5f);
  // A shrunk model of the wrong width is refused.
  EXPECT_THROW(copy_kept_neurons(*dense, pruner.mask().f32(), *dense), Error);
}

std::string config_error(const std::string& prune_toml) {
  try {
    Config config = Config::parse("[prune]\n" + prune_toml, "run.toml");
    Config section = config.section("prune");
    read_prune_config(section);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(PruneConfigErrors, NameTheKey) {
  EXPECT_NE(config_error("method = \"random\"\nend_step = 5").find("prune.method"), std::string::npos);
  EXPECT_NE(config_error("method = \"magnitude\"\nsparsity = 1.5\nend_step = 5").find("prune.sparsity"),
            std::string::npos);
  EXPECT_NE(config_error("method = \"magnitude\"").find("prune.end_step"), std::string::npos);
  EXPECT_NE(config_error("method = \"magnitude\"\nstart_step = 9\nend_step = 5").find("prune.end_step"),
            std::string::npos);
  EXPECT_NE(config_error("method = \"magnitude\"\nend_step = 5\nevery_steps = 0").find("prune.every_steps"),
            std::string::npos);
  EXPECT_NE(config_error("method = \"magnitude\"\nend_step = 5\nscope = \"net\"").find("prune.scope"),
            std::string::npos);
  EXPECT_NE(
      config_error("method = \"magnitude\"\nend_step = 5\nscope = \"global\"\nstructured = true").find("prune.scope"),
      std::string::npos);
  EXPECT_EQ(config_error("method = \"magnitude\"\nend_step = 5\nsparsity = 0.8"), "");

  auto model = mlp(kMlp);
  Sgd sgd(model->arena_elements(), SgdHyper{});
  auto comm = make_mpi_self_communicator(AllreduceAlgo::mpi);
  PruneConfig c = gradual(0.5, 1, 1, 1);
  c.layers = {1};  // relu
  try {
    Pruner(c, *model, sgd, *comm, 1);
    ADD_FAILURE() << "a relu layer was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("prune.layers: layer 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ringtrain
