// Private: DeviceBatch, how a host batch from the loader reaches the GPU for DataParallelStep:
// staged in pinned host memory, copied on its own stream, and cast on the device to the
// activation dtype; the compute (default) stream waits for the copy with an event.
#pragma once
#include <cstdint>
#include <memory>

#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

class DeviceBatch {
 public:
  virtual ~DeviceBatch() = default;
  // x: [n, ...] f32 on the host, n <= max_rows. Returns the device copy in the activation
  // dtype, valid until the next upload.
  virtual const Tensor& upload(const Tensor& x) = 0;
};

// sample: the per-sample shape; act: the activation dtype (f32, bf16, f16).
std::unique_ptr<DeviceBatch> make_device_batch(std::int64_t max_rows, const Shape& sample, DType act);

}  // namespace ringtrain
