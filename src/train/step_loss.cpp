// The CPU StepLoss: SoftmaxCrossEntropy (mean over the batch, gradient (p - onehot)/N) with the
// gradient multiplied by the loss scale.
#include "train/step_loss.hpp"

#include <vector>

#include "cuda/gpu_backend.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain {
namespace {

class CpuStepLoss final : public StepLoss {
 public:
  explicit CpuStepLoss(std::int64_t slots) : sums_(static_cast<std::size_t>(slots)) {}
  void compute(const Tensor& logits, const std::int32_t* labels, Tensor& dlogits, float loss_scale,
               std::int64_t slot) override {
    RT_REQUIRE(slot >= 0 && slot < static_cast<std::int64_t>(sums_.size()), Error, "StepLoss: slot {} of {}", slot,
               sums_.size());
    const double mean = loss_.forward(logits, labels);
    sums_[static_cast<std::size_t>(slot)] =
        LossSums{mean * static_cast<double>(logits.shape()[0]), static_cast<double>(loss_.correct())};
    loss_.backward(dlogits);
    if (loss_scale != 1.0f) {
      float* d = dlogits.f32();
      const std::int64_t n = dlogits.numel();
      for (std::int64_t i = 0; i < n; ++i) d[i] *= loss_scale;
    }
  }
  LossSums sums(std::int64_t count) override {
    RT_REQUIRE(count >= 0 && count <= static_cast<std::int64_t>(sums_.size()), Error,
               "StepLoss: {} slots asked for, made with {}", count, sums_.size());
    LossSums total;
    for (std::int64_t i = 0; i < count; ++i) {
      total.loss += sums_[static_cast<std::size_t>(i)].loss;
      total.correct += sums_[static_cast<std::size_t>(i)].correct;
    }
    return total;
  }

 private:
  SoftmaxCrossEntropy loss_;
  std::vector<LossSums> sums_;  // per slot
};

}  // namespace

std::unique_ptr<StepLoss> make_step_loss(Device device, std::int64_t max_rows, std::int64_t slots) {
  RT_REQUIRE(slots >= 1, Error, "StepLoss: {} slots", slots);
  if (device == Device::cuda) return gpu("runtime.backend=cuda").make_step_loss(max_rows, slots);
  return std::make_unique<CpuStepLoss>(slots);
}

}  // namespace ringtrain
