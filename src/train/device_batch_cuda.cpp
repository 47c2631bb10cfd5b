// DeviceBatch on CUDA: inputs and labels staged in pinned memory, copied on a copy stream, and
// the compute stream ordered after the copy with an event; then the cast kernel on the compute
// stream when activations are not f32.
#include <cuda_runtime.h>

#include <cstring>

#include "cuda/compute_stream.hpp"
#include "cuda/cuda_check.hpp"
#include "kernels/tensor_kernels.hpp"
#include "train/device_batch.hpp"

namespace ringtrain {
namespace {

class CudaDeviceBatch final : public DeviceBatch {
 public:
  CudaDeviceBatch(std::int64_t max_rows, const Shape& sample, DType act)
      : staged_(Tensor::empty(sample.with_batch(max_rows), DType::f32, Device::cuda)),
        act_(act == DType::f32 ? staged_ : Tensor::empty(sample.with_batch(max_rows), act, Device::cuda)),
        labels_(Tensor::empty(Shape{max_rows}, DType::i32, Device::cuda)) {
    RT_CUDA_CHECK(cudaMallocHost(&pinned_x_, staged_.nbytes()));
    RT_CUDA_CHECK(cudaMallocHost(&pinned_labels_, labels_.nbytes()));
    RT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    RT_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
    RT_CUDA_CHECK(cudaEventCreateWithFlags(&consumed_, cudaEventDisableTiming));
  }
  ~CudaDeviceBatch() override {
    cudaEventDestroy(consumed_);
    cudaEventDestroy(copied_);
    cudaStreamDestroy(copy_stream_);
    cudaFreeHost(pinned_labels_);
    cudaFreeHost(pinned_x_);
  }
  CudaDeviceBatch(const CudaDeviceBatch&) = delete;
  CudaDeviceBatch& operator=(const CudaDeviceBatch&) = delete;

  PlacedBatch upload(const Tensor& x, const std::int32_t* labels) override {
    const std::int64_t n = x.shape()[0];
    RT_REQUIRE(x.device() == Device::cpu && x.dtype() == DType::f32 && n <= staged_.shape()[0], Error,
               "DeviceBatch: expected at most {} host f32 rows, got {} {} rows", staged_.shape()[0],
               dtype_name(x.dtype()), n);
    const std::size_t label_bytes = static_cast<std::size_t>(n) * sizeof(std::int32_t);
    // The previous batch's copy must be done before the staging buffers are overwritten.
    RT_CUDA_CHECK(cudaEventSynchronize(copied_));
    std::memcpy(pinned_x_, x.raw(), x.nbytes());
    std::memcpy(pinned_labels_, labels, label_bytes);
    // ... and the device work queued so far (which may still read the previous batch) first.
    const cudaStream_t compute = cuda::compute_stream();
    RT_CUDA_CHECK(cudaEventRecord(consumed_, compute));
    RT_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, consumed_, 0));
    RT_CUDA_CHECK(cudaMemcpyAsync(staged_.raw(), pinned_x_, x.nbytes(), cudaMemcpyHostToDevice, copy_stream_));
    RT_CUDA_CHECK(cudaMemcpyAsync(labels_.raw(), pinned_labels_, label_bytes, cudaMemcpyHostToDevice, copy_stream_));
    RT_CUDA_CHECK(cudaEventRecord(copied_, copy_stream_));
    RT_CUDA_CHECK(cudaStreamWaitEvent(compute, copied_, 0));
    if (act_.raw() != staged_.raw())
      kernels::launch_cast(staged_.raw(), DType::f32, act_.raw(), act_.dtype(), x.numel(), compute);
    return PlacedBatch{act_.rows(0, n), labels_.data<std::int32_t>()};
  }

 private:
  Tensor staged_, act_, labels_;
  void* pinned_x_ = nullptr;
  void* pinned_labels_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t copied_ = nullptr;
  cudaEvent_t consumed_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceBatch> make_cuda_device_batch(std::int64_t max_rows, const Shape& sample, DType act) {
  return std::make_unique<CudaDeviceBatch>(max_rows, sample, act);
}

}  // namespace ringtrain
