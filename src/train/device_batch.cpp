// DeviceBatch for a model on the CPU: the loader's batch is already where the model computes.
#include "train/device_batch.hpp"

namespace ringtrain {
namespace {

class HostBatch final : public DeviceBatch {
 public:
  PlacedBatch upload(const Tensor& x, const std::int32_t* labels) override { return PlacedBatch{x, labels}; }
};

}  // namespace

std::unique_ptr<DeviceBatch> make_device_batch(Device device, std::int64_t max_rows, const Shape& sample, DType act) {
  if (device == Device::cuda) return make_cuda_device_batch(max_rows, sample, act);
  return std::make_unique<HostBatch>();
}

}  // namespace ringtrain
