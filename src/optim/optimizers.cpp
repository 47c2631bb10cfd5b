// SGD and AdamW over flat arenas: the segments of the arena (owned shard, weight decay or not)
// and their hyperparameters here; each segment's update by the device's operations
// (tensor/device_ops.hpp: a tight loop over the shared per-element rules on the host, the fused
// kernel applying the same rules on the GPU).
#include "ringtrain/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "ringtrain/core/error.hpp"
#include "tensor/device_ops.hpp"

namespace ringtrain {

Optimizer::Optimizer(std::int64_t num_params, std::vector<ArenaRange> owned)
    : num_params_(num_params), owned_(std::move(owned)) {
  if (owned_.empty() && num_params > 0) owned_.push_back({0, num_params});
  for (std::size_t i = 0; i < owned_.size(); ++i)
    RT_REQUIRE(owned_[i].count >= 0 && owned_[i].offset >= 0 && owned_[i].end() <= num_params &&
                   (i == 0 || owned_[i - 1].end() <= owned_[i].offset),
               Error, "optimizer: owned ranges must be sorted, disjoint and inside the arena of {} elements",
               num_params);
  plan_segments();
}

void Optimizer::exempt_from_weight_decay(std::vector<ArenaRange> ranges) {
  for (std::size_t i = 0; i < ranges.size(); ++i)
    RT_REQUIRE(ranges[i].count >= 0 && (i == 0 || ranges[i - 1].end() <= ranges[i].offset), Error,
               "exempt_from_weight_decay: ranges must be sorted and disjoint");
  no_decay_ = std::move(ranges);
  plan_segments();
}

void Optimizer::plan_segments() {
  std::vector<ArenaRange> decayed;  // the complement of no_decay_ in the arena
  std::int64_t at = 0;
  for (const ArenaRange& r : no_decay_) {
    if (r.offset > at) decayed.push_back({at, r.offset - at});
    at = std::max(at, r.end());
  }
  if (num_params_ > at) decayed.push_back({at, num_params_ - at});
  segments_.clear();
  for_each_owned(decayed, owned_, [&](std::int64_t offset, std::int64_t state, std::int64_t count) {
    segments_.push_back({offset, state, count, true});
  });
  for_each_owned(no_decay_, owned_, [&](std::int64_t offset, std::int64_t state, std::int64_t count) {
    segments_.push_back({offset, state, count, false});
  });
}

void Optimizer::step(float* params, const float* grads, std::int64_t n, float lr, float grad_scale,
                     const ComputeCopyOut& copy) {
  step_segments(params, grads, false, n, lr, grad_scale, nullptr, copy);
}

void Optimizer::step_scaled_on_device(float* params, const float* grads, std::int64_t n, float lr,
                                      const float* device_scale, const ComputeCopyOut& copy) {
  RT_REQUIRE(device_scale != nullptr, Error, "optimizer: step_scaled_on_device without a device scale");
  step_segments(params, grads, false, n, lr, 1.0f, device_scale, copy);
}

void Optimizer::step_packed(float* params, const float* owned_grads, std::int64_t n, float lr, float grad_scale) {
  step_segments(params, owned_grads, true, n, lr, grad_scale, nullptr, {});
}

void Optimizer::step_segments(float* params, const float* grads, bool packed, std::int64_t n, float lr,
                              float grad_scale, const float* device_scale, const ComputeCopyOut& copy) {
  RT_REQUIRE(n == num_params_, Error, "optimizer: step over {} elements, made for {}", n, num_params_);
  ++steps_taken_;
  for (const Segment& s : segments_) {
    ComputeCopyOut at = copy;  // the copy of this segment's parameters
    if (at.data != nullptr)
      at.data = static_cast<char*>(at.data) + static_cast<std::size_t>(s.offset) * dtype_size(at.dtype);
    update(params + s.offset, grads + (packed ? s.state_offset : s.offset), s.state_offset, s.count, lr, grad_scale,
           device_scale, at, s.weight_decay);
  }
}

Sgd::Sgd(std::int64_t num_params, const SgdHyper& hyper, Device device, std::vector<ArenaRange> owned)
    : Optimizer(num_params, std::move(owned)),
      hyper_(hyper),
      velocity_(Tensor::empty(Shape{state_elements()}, DType::f32, device)) {}

void Sgd::update(float* params, const float* grads, std::int64_t state_offset, std::int64_t n, float lr,
                 float grad_scale, const float* device_scale, const ComputeCopyOut& copy, bool weight_decay) {
  SgdHyper h = hyper_;
  h.lr = lr;
  if (!weight_decay) h.weight_decay = 0.0f;
  device_ops(velocity_.device())
      .sgd_update(params, grads, velocity_.f32() + state_offset, n, grad_scale, device_scale, copy, h);
}

AdamW::AdamW(std::int64_t num_params, const AdamWHyper& hyper, Device device, std::vector<ArenaRange> owned)
    : Optimizer(num_params, std::move(owned)),
      hyper_(hyper),
      m_(Tensor::empty(Shape{state_elements()}, DType::f32, device)),
      v_(Tensor::empty(Shape{state_elements()}, DType::f32, device)) {}

void AdamW::update(float* params, const float* grads, std::int64_t state_offset, std::int64_t n, float lr,
                   float grad_scale, const float* device_scale, const ComputeCopyOut& copy, bool weight_decay) {
  const std::int64_t t = steps_taken();
  AdamWHyper h = hyper_;
  h.lr = lr;
  if (!weight_decay) h.weight_decay = 0.0f;
  h.bias_correction1 = 1.0f - static_cast<float>(std::pow(h.beta1, static_cast<double>(t)));
  h.bias_correction2 = 1.0f - static_cast<float>(std::pow(h.beta2, static_cast<double>(t)));
  device_ops(m_.device())
      .adamw_update(params, grads, m_.f32() + state_offset, v_.f32() + state_offset, n, grad_scale, device_scale, copy,
                    h);
}

}  // namespace ringtrain
