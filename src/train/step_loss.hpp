// Private: StepLoss, softmax cross-entropy on the model's device for DataParallelStep. compute()
// queues the loss and its gradient (the batch mean's, times the loss scale); sums() returns
// this micro-batch's loss sum and correct count, waiting for the device only then, so the
// backward pass is queued before the host waits.
#pragma once
#include <cstdint>
#include <memory>

#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

struct LossSums {
  double loss = 0.0;     // sum of per-sample losses
  double correct = 0.0;  // samples whose arg-max logit is the label
};

class StepLoss {
 public:
  virtual ~StepLoss() = default;
  // logits, dlogits: [n, k] and labels (n entries) on the model's device. dlogits = (softmax -
  // onehot) / n * loss_scale.
  virtual void compute(const Tensor& logits, const std::int32_t* labels, Tensor& dlogits, float loss_scale) = 0;
  virtual LossSums sums() = 0;
};

// The StepLoss for a model on `device`; max_rows: the largest batch compute() will see (device
// buffers are sized once).
std::unique_ptr<StepLoss> make_step_loss(Device device, std::int64_t max_rows);

}  // namespace ringtrain
