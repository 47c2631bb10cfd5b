// SGD and AdamW over flat arenas: one tight loop over the shared per-element rules on the host,
// or the fused kernel applying the same rules on the GPU (optim/device_update.hpp).
#include "ringtrain/optim/optimizer.hpp"

#include <cmath>

#include "optim/device_update.hpp"

namespace ringtrain {

Sgd::Sgd(std::int64_t num_params, const SgdHyper& hyper, Device device)
    : hyper_(hyper), velocity_(Tensor::empty(Shape{num_params}, DType::f32, device)) {}

void Sgd::step(float* params, const float* grads, std::int64_t n, float lr, float grad_scale) {
  ++steps_taken_;
  SgdHyper h = hyper_;
  h.lr = lr;
  float* v = velocity_.f32();
  if (velocity_.device() == Device::cuda) return device_sgd_update(params, grads, v, n, grad_scale, h);
  const SgdHyper rule = h;  // as in AdamW::step
  for (std::int64_t i = 0; i < n; ++i) sgd_update(params[i], grads[i] * grad_scale, v[i], rule);
}

AdamW::AdamW(std::int64_t num_params, const AdamWHyper& hyper, Device device)
    : hyper_(hyper),
      m_(Tensor::empty(Shape{num_params}, DType::f32, device)),
      v_(Tensor::empty(Shape{num_params}, DType::f32, device)) {}

void AdamW::step(float* params, const float* grads, std::int64_t n, float lr, float grad_scale) {
  const std::int64_t t = ++steps_taken_;
  AdamWHyper h = hyper_;
  h.lr = lr;
  h.bias_correction1 = 1.0f - static_cast<float>(std::pow(h.beta1, static_cast<double>(t)));
  h.bias_correction2 = 1.0f - static_cast<float>(std::pow(h.beta2, static_cast<double>(t)));
  float* m = m_.f32();
  float* v = v_.f32();
  if (m_.device() == Device::cuda) return device_adamw_update(params, grads, m, v, n, grad_scale, h);
  const AdamWHyper rule = h;  // h's address escaped above: a fresh copy lets the loop vectorise
  for (std::int64_t i = 0; i < n; ++i) adamw_update(params[i], grads[i] * grad_scale, m[i], v[i], rule);
}

}  // namespace ringtrain
