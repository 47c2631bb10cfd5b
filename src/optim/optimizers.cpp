// SGD and AdamW over flat arenas: one tight loop over the shared per-element rules on the host,
// or the fused kernel applying the same rules on the GPU (optim/device_update.hpp).
#include "ringtrain/optim/optimizer.hpp"

#include <cmath>

#include "optim/device_update.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {

Sgd::Sgd(std::int64_t num_params, const SgdHyper& hyper, Device device)
    : hyper_(hyper), velocity_(Tensor::empty(Shape{num_params}, DType::f32, device)) {}

void Optimizer::exempt_from_weight_decay(std::vector<ArenaRange> ranges) {
  for (std::size_t i = 0; i < ranges.size(); ++i)
    RT_REQUIRE(ranges[i].count >= 0 && (i == 0 || ranges[i - 1].end() <= ranges[i].offset), Error,
               "exempt_from_weight_decay: ranges must be sorted and disjoint");
  no_decay_ = std::move(ranges);
}

void Optimizer::step(float* params, const float* grads, std::int64_t n, float lr, float grad_scale) {
  ++steps_taken_;
  std::int64_t at = 0;  // alternating segments: decayed up to each exempt range, then the range
  for (const ArenaRange& r : no_decay_) {
    if (r.offset > at) update(params, grads, at, r.offset - at, lr, grad_scale, true);
    if (r.count > 0) update(params, grads, r.offset, r.count, lr, grad_scale, false);
    at = r.end();
  }
  if (n > at) update(params, grads, at, n - at, lr, grad_scale, true);
}

void Sgd::update(float* params, const float* grads, std::int64_t begin, std::int64_t n, float lr, float grad_scale,
                 bool weight_decay) {
  SgdHyper h = hyper_;
  h.lr = lr;
  if (!weight_decay) h.weight_decay = 0.0f;
  params += begin;
  grads += begin;
  float* v = velocity_.f32() + begin;
  if (velocity_.device() == Device::cuda) return device_sgd_update(params, grads, v, n, grad_scale, h);
  const SgdHyper rule = h;  // as in AdamW::step
  for (std::int64_t i = 0; i < n; ++i) sgd_update(params[i], grads[i] * grad_scale, v[i], rule);
}

AdamW::AdamW(std::int64_t num_params, const AdamWHyper& hyper, Device device)
    : hyper_(hyper),
      m_(Tensor::empty(Shape{num_params}, DType::f32, device)),
      v_(Tensor::empty(Shape{num_params}, DType::f32, device)) {}

void AdamW::update(float* params, const float* grads, std::int64_t begin, std::int64_t n, float lr, float grad_scale,
                   bool weight_decay) {
  const std::int64_t t = steps_taken();
  AdamWHyper h = hyper_;
  h.lr = lr;
  if (!weight_decay) h.weight_decay = 0.0f;
  h.bias_correction1 = 1.0f - static_cast<float>(std::pow(h.beta1, static_cast<double>(t)));
  h.bias_correction2 = 1.0f - static_cast<float>(std::pow(h.beta2, static_cast<double>(t)));
  params += begin;
  grads += begin;
  float* m = m_.f32() + begin;
  float* v = v_.f32() + begin;
  if (m_.device() == Device::cuda) return device_adamw_update(params, grads, m, v, n, grad_scale, h);
  const AdamWHyper rule = h;  // h's address escaped above: a fresh copy lets the loop vectorise
  for (std::int64_t i = 0; i < n; ++i) adamw_update(params[i], grads[i] * grad_scale, m[i], v[i], rule);
}

}  // namespace ringtrain
