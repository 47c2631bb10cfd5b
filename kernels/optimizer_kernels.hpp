// Host launchers for the optimizer kernels (optimizer_kernels.cu). Each takes the CUDA
// stream as an opaque pointer (cudaStream_t) so this header stays free of CUDA headers,
// checks the launch, and throws ringtrain::Error on failure.
#pragma once
#include <cstdint>

#include "ringtrain/optim/update_rules.hpp"

namespace ringtrain::kernels {

// params, grads, velocity, m, v: device pointers to n floats; copy: where the updated parameters
// also go in the compute dtype (update_rules.hpp). Each gradient is multiplied by
// grad_scale before the rule (as the CPU optimizers' step does: 1 / loss scale, 1 / world size)
// and, when device_scale is given, by the f32 there, read when the kernel runs: 0 there skips the
// update (parameters and state untouched; a step decided on the device, step_decision.hpp).
void launch_sgd_update(float* params, const float* grads, float* velocity, std::int64_t n, float grad_scale,
                       const SgdHyper& hyper, void* stream, const float* device_scale = nullptr,
                       ComputeCopyOut copy = {});
void launch_adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, float grad_scale,
                         const AdamWHyper& hyper, void* stream, const float* device_scale = nullptr,
                         ComputeCopyOut copy = {});

}  // namespace ringtrain::kernels
