// The process's compute and copy streams (see src/cuda/compute_stream.hpp). Never destroyed:
// tensors and layers may still queue work, and freed buffers record events, while static objects
// are torn down after main returns.
#include "cuda/compute_stream.hpp"

#include "check/cuda_check.hpp"

namespace ringtrain::cuda {
namespace {

// A new stream with `flags` on the current device (the rank's bound GPU).
cudaStream_t new_stream(unsigned flags) {
  cudaStream_t s = nullptr;
  RT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, flags));
  return s;
}

}  // namespace

cudaStream_t compute_stream() {
  static const cudaStream_t stream = new_stream(cudaStreamDefault);
  return stream;
}

cudaStream_t copy_stream() {
  static const cudaStream_t stream = new_stream(cudaStreamNonBlocking);
  return stream;
}

}  // namespace ringtrain::cuda
