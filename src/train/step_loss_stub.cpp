// The CUDA StepLoss in a build without CUDA: says so clearly.
#include "ringtrain/core/error.hpp"
#include "train/step_loss.hpp"

namespace ringtrain {

std::unique_ptr<StepLoss> make_cuda_step_loss(std::int64_t) {
  throw NotCompiled("runtime.backend=cuda: this ringtrain was built without CUDA (RINGTRAIN_WITH_CUDA=OFF)");
}

}  // namespace ringtrain
