// DeviceBatch on CUDA: pinned staging buffer, a copy stream and event, then the cast kernel
// on the default stream (after the event) when activations are not f32.
#include <cuda_runtime.h>

#include <cstring>

#include "cuda/cuda_check.hpp"
#include "kernels/tensor_kernels.hpp"
#include "train/device_batch.hpp"

namespace ringtrain {
namespace {

class CudaDeviceBatch final : public DeviceBatch {
 public:
  CudaDeviceBatch(std::int64_t max_rows, const Shape& sample, DType act)
      : sample_(sample),
        staged_(Tensor::empty(sample.with_batch(max_rows), DType::f32, Device::cuda)),
        act_(act == DType::f32 ? staged_ : Tensor::empty(sample.with_batch(max_rows), act, Device::cuda)) {
    RT_CUDA_CHECK(cudaMallocHost(&pinned_, staged_.nbytes()));
    RT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    RT_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
    RT_CUDA_CHECK(cudaEventCreateWithFlags(&consumed_, cudaEventDisableTiming));
  }
  ~CudaDeviceBatch() override {
    cudaEventDestroy(consumed_);
    cudaEventDestroy(copied_);
    cudaStreamDestroy(copy_stream_);
    cudaFreeHost(pinned_);
  }
  CudaDeviceBatch(const CudaDeviceBatch&) = delete;
  CudaDeviceBatch& operator=(const CudaDeviceBatch&) = delete;

  const Tensor& upload(const Tensor& x) override {
    const std::int64_t n = x.shape()[0];
    RT_REQUIRE(x.device() == Device::cpu && x.dtype() == DType::f32 && n <= staged_.shape()[0], Error,
               "DeviceBatch: expected at most {} host f32 rows, got {} {} rows", staged_.shape()[0],
               dtype_name(x.dtype()), n);
    // The previous batch's copy must be done before the staging buffer is overwritten.
    RT_CUDA_CHECK(cudaEventSynchronize(copied_));
    std::memcpy(pinned_, x.raw(), x.nbytes());
    // ... and the device work queued so far (which may still read the previous batch) first.
    RT_CUDA_CHECK(cudaEventRecord(consumed_, cudaStreamLegacy));
    RT_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, consumed_, 0));
    RT_CUDA_CHECK(cudaMemcpyAsync(staged_.raw(), pinned_, x.nbytes(), cudaMemcpyHostToDevice, copy_stream_));
    RT_CUDA_CHECK(cudaEventRecord(copied_, copy_stream_));
    RT_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, copied_, 0));
    if (act_.raw() != staged_.raw())
      kernels::launch_cast(staged_.raw(), DType::f32, act_.raw(), act_.dtype(), x.numel(), nullptr);
    view_ = act_.rows(0, n);
    return view_;
  }

 private:
  Shape sample_;
  Tensor staged_, act_, view_;
  void* pinned_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t copied_ = nullptr;
  cudaEvent_t consumed_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceBatch> make_device_batch(std::int64_t max_rows, const Shape& sample, DType act) {
  return std::make_unique<CudaDeviceBatch>(max_rows, sample, act);
}

}  // namespace ringtrain
