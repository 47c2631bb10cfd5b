// The CPU StepLoss: SoftmaxCrossEntropy (mean over the batch, gradient (p - onehot)/N) with the
// gradient multiplied by the loss scale.
#include "train/step_loss.hpp"

#include "cuda/gpu_backend.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain {
namespace {

class CpuStepLoss final : public StepLoss {
 public:
  void compute(const Tensor& logits, const std::int32_t* labels, Tensor& dlogits, float loss_scale) override {
    const double mean = loss_.forward(logits, labels);
    sums_ = LossSums{mean * static_cast<double>(logits.shape()[0]), static_cast<double>(loss_.correct())};
    loss_.backward(dlogits);
    if (loss_scale != 1.0f) {
      float* d = dlogits.f32();
      for (std::int64_t i = 0; i < dlogits.numel(); ++i) d[i] *= loss_scale;
    }
  }
  LossSums sums() override { return sums_; }

 private:
  SoftmaxCrossEntropy loss_;
  LossSums sums_;
};

}  // namespace

std::unique_ptr<StepLoss> make_step_loss(Device device, std::int64_t max_rows) {
  if (device == Device::cuda) return gpu("runtime.backend=cuda").make_step_loss(max_rows);
  return std::make_unique<CpuStepLoss>();
}

}  // namespace ringtrain
