// StepGraph in a build without CUDA: says so clearly.
#include "ringtrain/core/error.hpp"
#include "train/step_graph.hpp"

namespace ringtrain {

std::unique_ptr<StepGraph> make_step_graph() {
  throw NotCompiled("train.cuda_graph: this ringtrain was built without CUDA (RINGTRAIN_WITH_CUDA=OFF)");
}

}  // namespace ringtrain
