// DeviceBatch for a model on the CPU: the loader's batch is already where the model computes
// (and decoded: raw batches exist for the GPU only).
#include "train/device_batch.hpp"

#include "cuda/gpu_backend.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {

class HostBatch final : public DeviceBatch {
 public:
  void stage(const Tensor& x, const std::int32_t* labels) override { staged_ = PlacedBatch{x, labels}; }
  void stage_raw(const Tensor&, const AugmentDraw*, const std::int32_t*) override {
    throw Error("DeviceBatch: raw uint8 batches are augmented on a GPU only; this model is on the CPU");
  }
  PlacedBatch place() override { return staged_; }

 private:
  PlacedBatch staged_;  // the host batch itself
};

}  // namespace

std::unique_ptr<DeviceBatch> make_device_batch(Device device, std::int64_t max_rows, const Shape& sample, DType input,
                                               std::int64_t labels_per_row, const GpuAugment* augment) {
  if (device == Device::cuda)
    return gpu("runtime.backend=cuda").make_device_batch(max_rows, sample, input, labels_per_row, augment);
  return std::make_unique<HostBatch>();
}

}  // namespace ringtrain
