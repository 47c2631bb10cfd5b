// Whole-tensor operations that run where the tensors live (host loops, or kernels on the
// default CUDA stream), so the training step is written once for both backends. Operands of
// one call must be on the same device.
#pragma once
#include <vector>

#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

void add_into(const Tensor& dst, const Tensor& src);  // dst += src; same element count and dtype (host: f32)
// Every dst += src in one pass that reads src once (1 to 4 targets, f32, same element count):
// memory traffic of an in-place update that reads src and rewrites each target. The targets
// are distinct tensors, none of them src.
void add_into_each(const std::vector<const Tensor*>& dsts, const Tensor& src);
// dst = src converted to dst's dtype (f32, bf16, f16; the same element count), rounding to
// nearest even. Device tensors only (the CPU emulates low precision by rounding f32 in place).
void cast_into(const Tensor& dst, const Tensor& src);
// Whether any element is Inf or NaN (f32). On the device this waits for the answer.
bool has_nonfinite(const Tensor& t);
// The sum of the squared elements (f32), accumulated in double in a fixed order (the same
// result every call). On the device this waits for the answer.
double sum_of_squares(const Tensor& t);
// Waits until the device has finished the work queued so far (a no-op for host tensors):
// step timings measure work done, not work queued.
void synchronize(Device device);

}  // namespace ringtrain
