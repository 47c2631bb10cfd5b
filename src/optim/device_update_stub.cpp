// The fused GPU optimizer updates in a build without CUDA: say so clearly.
#include "optim/device_update.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {
[[noreturn]] void not_compiled() {
  throw NotCompiled("optimizer on the GPU: this ringtrain was built without CUDA (RINGTRAIN_WITH_CUDA=OFF)");
}
}  // namespace

void device_sgd_update(float*, const float*, float*, std::int64_t, float, const SgdHyper&) { not_compiled(); }
void device_adamw_update(float*, const float*, float*, float*, std::int64_t, float, const AdamWHyper&) {
  not_compiled();
}

}  // namespace ringtrain
