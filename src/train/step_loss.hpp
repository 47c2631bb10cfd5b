// Private: StepLoss, softmax cross-entropy on the model's device for DataParallelStep and
// evaluation. compute() queues the loss and its gradient (the batch mean's, times the loss
// scale) and keeps the micro-batch's loss sum and correct count in a slot; sums() adds up the
// slots of a step, waiting for the device only then: after every micro-batch's backward is
// queued, so the host never stands between a forward and its backward.
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
  // onehot) / n * loss_scale. The sums go to slot `slot` (< the slots it was made with).
  virtual void compute(const Tensor& logits, const std::int32_t* labels, Tensor& dlogits, float loss_scale,
                       std::int64_t slot) = 0;
  // Slots [0, count) added in order (each written by a compute() since the last sums()).
  virtual LossSums sums(std::int64_t count) = 0;
  // A GPU StepLoss's slots in device memory, (loss, correct) doubles per slot, for a step that
  // sums them on the device (DeviceStepStats); null on the CPU.
  virtual const double* device_slots() const { return nullptr; }
};

// The StepLoss for a model on `device`; max_rows: the largest batch compute() will see, slots:
// the micro-batches of a step (device buffers are sized once).
std::unique_ptr<StepLoss> make_step_loss(Device device, std::int64_t max_rows, std::int64_t slots);

}  // namespace ringtrain
