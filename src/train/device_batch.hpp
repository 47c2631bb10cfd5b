// Private: DeviceBatch, how a host batch from the loader reaches the model's device for
// DataParallelStep and evaluation. On the GPU: staged in pinned host memory, copied on its own
// stream, and cast on the device to the activation dtype; the compute stream waits for the copy
// with an event, so the host never waits for the device here. On the CPU it passes through.
#pragma once
#include <cstdint>
#include <memory>

#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

// A batch where the model computes: x in the activation dtype, labels (one per row) beside it.
struct PlacedBatch {
  Tensor x;
  const std::int32_t* labels = nullptr;
};

class DeviceBatch {
 public:
  virtual ~DeviceBatch() = default;
  // x: [n, ...] f32 on the host, n <= max_rows; labels: n host entries. The result is valid
  // until the next upload.
  virtual PlacedBatch upload(const Tensor& x, const std::int32_t* labels) = 0;
};

// sample: the per-sample shape; act: the activation dtype (f32, bf16, f16).
std::unique_ptr<DeviceBatch> make_device_batch(Device device, std::int64_t max_rows, const Shape& sample, DType act);
std::unique_ptr<DeviceBatch> make_cuda_device_batch(std::int64_t max_rows, const Shape& sample,
                                                    DType act);  // device_batch_{cuda,stub}.cpp

}  // namespace ringtrain
