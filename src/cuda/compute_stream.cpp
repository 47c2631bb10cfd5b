// The process's compute stream (see src/cuda/compute_stream.hpp). Never destroyed: tensors and
// layers may still queue work while static objects are torn down after main returns.
#include "cuda/compute_stream.hpp"

#include "check/cuda_check.hpp"

namespace ringtrain::cuda {

cudaStream_t compute_stream() {
  static const cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    RT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamDefault));
    return s;
  }();
  return stream;
}

}  // namespace ringtrain::cuda
