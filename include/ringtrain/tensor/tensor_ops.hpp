// Whole-tensor operations that run where the tensors live (host loops, or kernels on the
// default CUDA stream), so the training step is written once for both backends. Operands of
// one call must be on the same device.
#pragma once

#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

void add_into(const Tensor& dst, const Tensor& src);  // dst += src; f32, same element count
// Whether any element is Inf or NaN (f32). On the device this waits for the answer.
bool has_nonfinite(const Tensor& t);
// Waits until the device has finished the work queued so far (a no-op for host tensors):
// step timings measure work done, not work queued.
void synchronize(Device device);

}  // namespace ringtrain
