// HostOps' optimizer updates (see host_ops.hpp): one tight loop over update_rules.hpp's
// per-element rules, the rules the GPU's fused kernels apply too, over ranges of the elements
// spread on the rank's compute threads (host_parallel).
#include "ringtrain/core/error.hpp"
#include "ringtrain/optim/update_rules.hpp"
#include "tensor/host_ops.hpp"
#include "tensor/host_parallel.hpp"

namespace ringtrain {

void HostOps::sgd_update(float* params, const float* grads, float* velocity, std::int64_t n, float grad_scale,
                         const float* device_scale, const ComputeCopyOut& copy, const SgdHyper& hyper) const {
  RT_REQUIRE(device_scale == nullptr && copy.data == nullptr, Error,
             "sgd: a device scale or compute copy for an optimizer on the CPU");
  host_parallel::for_ranges(n, host_parallel::kElementGrain, [&](std::int64_t begin, std::int64_t end) {
    const SgdHyper rule = hyper;  // a local copy: its address escapes nowhere, so the loop vectorises
    for (std::int64_t i = begin; i < end; ++i)
      ringtrain::sgd_update(params[i], grads[i] * grad_scale, velocity[i], rule);
  });
}

void HostOps::adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, float grad_scale,
                           const float* device_scale, const ComputeCopyOut& copy, const AdamWHyper& hyper) const {
  RT_REQUIRE(device_scale == nullptr && copy.data == nullptr, Error,
             "adamw: a device scale or compute copy for an optimizer on the CPU");
  host_parallel::for_ranges(n, host_parallel::kElementGrain, [&](std::int64_t begin, std::int64_t end) {
    const AdamWHyper rule = hyper;  // as in sgd_update
    for (std::int64_t i = begin; i < end; ++i)
      ringtrain::adamw_update(params[i], grads[i] * grad_scale, m[i], v[i], rule);
  });
}

}  // namespace ringtrain
