// The pruning mask on the GPU in a build without CUDA: say so clearly.
#include "prune/device_mask.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {

void device_apply_mask(float*, const float*, std::int64_t) {
  throw NotCompiled("pruning on the GPU: this ringtrain was built without CUDA (RINGTRAIN_WITH_CUDA=OFF)");
}

}  // namespace ringtrain
