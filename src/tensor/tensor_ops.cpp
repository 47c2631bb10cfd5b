// Whole-tensor operations (see the header): checked here, computed by the device's operations
// (tensor/device_ops.hpp: the host's loops, or the GPU backend's kernels).
#include "ringtrain/tensor/tensor_ops.hpp"

#include "cuda/gpu_backend.hpp"
#include "ringtrain/core/error.hpp"
#include "tensor/device_ops.hpp"

namespace ringtrain {
namespace {
constexpr const char* kOnGpu = "tensor operation on the GPU";
}  // namespace

void cast_into(const Tensor& dst, const Tensor& src) {
  RT_REQUIRE(dst.numel() == src.numel() && dst.device() == Device::cuda && src.device() == Device::cuda, Error,
             "cast_into: {} -> {}: element counts differ or not both on the GPU", src.shape().str(), dst.shape().str());
  gpu(kOnGpu).cast(dst.raw(), dst.dtype(), src.raw(), src.dtype(), dst.numel());
}

void add_into(const Tensor& dst, const Tensor& src) {
  RT_REQUIRE(dst.numel() == src.numel() && dst.device() == src.device() && dst.dtype() == src.dtype(), Error,
             "add_into: {} += {}: element counts, devices or dtypes differ", dst.shape().str(), src.shape().str());
  device_ops(dst.device()).add_into(dst.raw(), src.raw(), dst.numel(), dst.dtype());
}

void add_into_each(const std::vector<const Tensor*>& dsts, const Tensor& src) {
  constexpr std::size_t kMaxTargets = 4;
  RT_REQUIRE(!dsts.empty() && dsts.size() <= kMaxTargets, Error, "add_into_each: {} targets (1..{})", dsts.size(),
             kMaxTargets);
  float* targets[kMaxTargets] = {};
  for (std::size_t k = 0; k < dsts.size(); ++k) {
    const Tensor& dst = *dsts[k];
    RT_REQUIRE(dst.numel() == src.numel() && dst.device() == src.device(), Error,
               "add_into_each: {} += {}: element counts or devices differ", dst.shape().str(), src.shape().str());
    targets[k] = dst.f32();
  }
  device_ops(src.device()).add_into_each(targets, static_cast<int>(dsts.size()), src.f32(), src.numel());
}

double sum_of_squares(const Tensor& t) { return device_ops(t.device()).sum_of_squares(t.f32(), t.numel()); }

bool has_nonfinite(const Tensor& t) { return device_ops(t.device()).has_nonfinite(t.f32(), t.numel()); }

void synchronize(Device device) { device_ops(device).synchronize(); }

}  // namespace ringtrain
