// Whole-tensor operations (see the header): host loops here, device work through
// tensor/device_ops.hpp (kernels in CUDA builds, NotCompiled otherwise).
#include "ringtrain/tensor/tensor_ops.hpp"

#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/rounding.hpp"
#include "tensor/device_ops.hpp"

namespace ringtrain {

void add_into(const Tensor& dst, const Tensor& src) {
  RT_REQUIRE(dst.numel() == src.numel() && dst.device() == src.device(), Error,
             "add_into: {} += {}: element counts or devices differ", dst.shape().str(), src.shape().str());
  if (dst.device() == Device::cuda) return device_add_into(dst.f32(), src.f32(), dst.numel());
  float* d = dst.f32();
  const float* s = src.f32();
  for (std::int64_t i = 0; i < dst.numel(); ++i) d[i] += s[i];
}

bool has_nonfinite(const Tensor& t) {
  if (t.device() == Device::cuda) return device_has_nonfinite(t.f32(), t.numel());
  return has_nonfinite(t.f32(), t.numel());
}

void synchronize(Device device) {
  if (device == Device::cuda) device_synchronize();
}

}  // namespace ringtrain
