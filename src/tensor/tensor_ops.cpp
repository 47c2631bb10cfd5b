// Whole-tensor operations (see the header): host loops here, device work through
// the GPU backend (cuda/gpu_backend.hpp: kernels in CUDA builds, NotCompiled otherwise).
#include "ringtrain/tensor/tensor_ops.hpp"

#include "cuda/gpu_backend.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/rounding.hpp"

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
  if (dst.device() == Device::cuda) return gpu(kOnGpu).add_into(dst.raw(), src.raw(), dst.numel(), dst.dtype());
  float* d = dst.f32();
  const float* s = src.f32();
  const std::int64_t n = dst.numel();  // not in the loop's condition: an out-of-line call per element
  for (std::int64_t i = 0; i < n; ++i) d[i] += s[i];
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
  const auto count = static_cast<int>(dsts.size());
  if (src.device() == Device::cuda) return gpu(kOnGpu).add_into_each(targets, count, src.f32(), src.numel());
  // One fused loop, every target streamed side by side as an update streams its arenas.
  const float* s = src.f32();
  const std::int64_t n = src.numel();
  auto add = [s, n](auto*... d) {
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = s[i];
      ((d[i] += v), ...);
    }
  };
  switch (count) {
    case 1: return add(targets[0]);
    case 2: return add(targets[0], targets[1]);
    case 3: return add(targets[0], targets[1], targets[2]);
    default: return add(targets[0], targets[1], targets[2], targets[3]);
  }
}

double sum_of_squares(const Tensor& t) {
  if (t.device() == Device::cuda) return gpu(kOnGpu).sum_of_squares(t.f32(), t.numel());
  // kLanes independent sums (lane k takes the elements i with i % kLanes == k), combined in
  // lane order: a fixed order, without the one long chain of dependent additions.
  constexpr std::int64_t kLanes = 8;
  const float* x = t.f32();
  const std::int64_t n = t.numel();
  double lane[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::int64_t k = 0; k < kLanes; ++k) lane[k] += static_cast<double>(x[i + k]) * x[i + k];
  for (std::int64_t k = 0; i + k < n; ++k) lane[k] += static_cast<double>(x[i + k]) * x[i + k];
  double sum = 0.0;
  for (const double v : lane) sum += v;
  return sum;
}

bool has_nonfinite(const Tensor& t) {
  if (t.device() == Device::cuda) return gpu(kOnGpu).has_nonfinite(t.f32(), t.numel());
  return has_nonfinite(t.f32(), t.numel());
}

void synchronize(Device device) {
  if (device == Device::cuda) gpu(kOnGpu).synchronize();
}

}  // namespace ringtrain
