// Private: the device side of tensor_ops.hpp, on the default CUDA stream (device_ops_cuda.cpp);
// device_ops_stub.cpp throws NotCompiled in builds without CUDA.
#pragma once
#include <cstdint>

namespace ringtrain {

void device_add_into(float* dst, const float* src, std::int64_t n);
void device_add_into_each(float* const* dsts, int count, const float* src, std::int64_t n);
bool device_has_nonfinite(const float* x, std::int64_t n);
double device_sum_of_squares(const float* x, std::int64_t n);
void device_synchronize();

}  // namespace ringtrain
