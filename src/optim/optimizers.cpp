// SGD and AdamW over flat arenas: one tight loop over the shared per-element rules.
#include "ringtrain/optim/optimizer.hpp"

#include <cmath>

namespace ringtrain {

Sgd::Sgd(std::int64_t num_params, const SgdHyper& hyper)
    : hyper_(hyper), velocity_(Tensor::empty(Shape{num_params})) {}

void Sgd::step(float* params, const float* grads, std::int64_t n, float lr, float grad_scale) {
  ++steps_taken_;
  SgdHyper h = hyper_;
  h.lr = lr;
  float* v = velocity_.f32();
  for (std::int64_t i = 0; i < n; ++i) sgd_update(params[i], grads[i] * grad_scale, v[i], h);
}

AdamW::AdamW(std::int64_t num_params, const AdamWHyper& hyper)
    : hyper_(hyper), m_(Tensor::empty(Shape{num_params})), v_(Tensor::empty(Shape{num_params})) {}

void AdamW::step(float* params, const float* grads, std::int64_t n, float lr, float grad_scale) {
  const std::int64_t t = ++steps_taken_;
  AdamWHyper h = hyper_;
  h.lr = lr;
  h.bias_correction1 = 1.0f - static_cast<float>(std::pow(h.beta1, static_cast<double>(t)));
  h.bias_correction2 = 1.0f - static_cast<float>(std::pow(h.beta2, static_cast<double>(t)));
  float* m = m_.f32();
  float* v = v_.f32();
  for (std::int64_t i = 0; i < n; ++i) adamw_update(params[i], grads[i] * grad_scale, m[i], v[i], h);
}

}  // namespace ringtrain
