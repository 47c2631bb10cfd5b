// Private: the fused optimizer updates on the GPU (one kernel launch over the whole arena, on
// the default stream, so they follow the gradient allreduce). Without CUDA: NotCompiled.
#pragma once
#include <cstdint>

#include "ringtrain/optim/update_rules.hpp"

namespace ringtrain {

void device_sgd_update(float* params, const float* grads, float* velocity, std::int64_t n, float grad_scale,
                       const SgdHyper& hyper);
void device_adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, float grad_scale,
                         const AdamWHyper& hyper);

}  // namespace ringtrain
