// The CUDA layer maker in a build without CUDA: says so clearly.
#include "ringtrain/core/error.hpp"
#include "nn/layer_maker.hpp"

namespace ringtrain {

std::unique_ptr<LayerMaker> make_cuda_layer_maker(DType, bool) {
  throw NotCompiled("runtime.backend=cuda: this ringtrain was built without CUDA (RINGTRAIN_WITH_CUDA=OFF)");
}

}  // namespace ringtrain
