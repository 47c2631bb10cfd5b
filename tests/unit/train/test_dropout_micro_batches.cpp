// Dropout with gradient accumulation: every micro-batch of a step draws its own mask (issue 18,
// item 3). The step passes the micro-batch index to the layers (seen by a recording layer), the
// key of micro-batch 0 is that of a run without accumulation, and micro-batch 1's mask differs.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/nn/dropout_rule.hpp"
#include "ringtrain/nn/layers.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/train/data_parallel_step.hpp"

namespace ringtrain {
namespace {

// An identity layer that records the micro-batch index of every training forward.
class RecordMicroBatch final : public Layer {
 public:
  explicit RecordMicroBatch(std::vector<std::int64_t>* seen) : seen_(seen) {}
  std::string_view kind() const override { return "record"; }
  Shape configure(const Shape& input) override { return input; }
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override {
    if (info.training) seen_->push_back(info.micro_batch);
    std::memcpy(y.raw(), x.raw(), x.nbytes());
  }
  void backward(const Tensor&, const Tensor&, const Tensor& dy, Tensor* dx) override {
    if (dx != nullptr) std::memcpy(dx->raw(), dy.raw(), dy.nbytes());
  }

 private:
  std::vector<std::int64_t>* seen_;
};

TEST(DropoutMicroBatches, TheStepPassesEachMicroBatchItsIndex) {
  std::vector<std::int64_t> seen;
  std::vector<ModelNode> nodes;  // a sequential stack: each node reads the previous one
  nodes.push_back({std::make_unique<RecordMicroBatch>(&seen), "", {}});
  nodes.push_back({std::make_unique<Flatten>(), "", {}});
  nodes.push_back({std::make_unique<Linear>(4, true), "", {}});
  const Shape sample{1, 2, 2};
  Model model(std::move(nodes), sample);
  model.init_params(1);
  Sgd sgd(model.arena_elements(), SgdHyper{});
  auto stats = make_mpi_self_communicator(AllreduceAlgo::ring);
  auto grads = make_mpi_self_communicator(AllreduceAlgo::ring);
  StepOptions options;
  options.accumulation_steps = 3;
  DataParallelStep step(model, sgd, *stats, *grads, 2, options, nullptr);
  Tensor x = Tensor::empty(sample.with_batch(6));
  for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 0.01f * static_cast<float>(i);
  const std::vector<std::int32_t> labels = {0, 1, 2, 3, 0, 1};
  step.run(x, labels.data(), StepInfo{true, 7, 0, 0}, 0.1f);
  EXPECT_EQ(seen, (std::vector<std::int64_t>{0, 1, 2}));
}

TEST(DropoutMicroBatches, EachMicroBatchDrawsItsOwnMask) {
  EXPECT_EQ(dropout_key(5, 3, 1, 2, 0), dropout_key(5, 3, 1, 2));  // no accumulation: masks unchanged
  EXPECT_NE(dropout_key(5, 3, 1, 2, 1), dropout_key(5, 3, 1, 2, 0));
  Dropout dropout(0.5, 0);
  const Shape sample{64};
  dropout.configure(sample);
  Tensor x = Tensor::empty(sample.with_batch(1));
  for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 1.0f;
  Tensor y0 = Tensor::empty(sample.with_batch(1));
  Tensor y1 = Tensor::empty(sample.with_batch(1));
  StepInfo info{true, 5, 3, 1};
  dropout.forward(x, y0, info);
  info.micro_batch = 1;
  dropout.forward(x, y1, info);
  EXPECT_NE(std::memcmp(y0.raw(), y1.raw(), y0.nbytes()), 0) << "micro-batch 1 reused micro-batch 0's mask";
}

}  // namespace
}  // namespace ringtrain
