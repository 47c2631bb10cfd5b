// DeviceBatch on CUDA: the batch's parts staged in pinned memory, copied on the process's copy
// stream (cuda::copy_stream), and the compute stream ordered after the copy with an event; then,
// on the compute stream, the cast kernel (f32 batches, activations not f32) or the augmentation
// kernel (raw uint8 batches).
#include <cuda_runtime.h>

#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

#include "cuda/compute_stream.hpp"
#include "check/cuda_check.hpp"
#include "cuda/cuda_backend.hpp"
#include "data/sample_decoder.hpp"
#include "kernels/augment_kernels.hpp"
#include "ringtrain/tensor/memory_pool.hpp"
#include "kernels/tensor_kernels.hpp"
#include "train/device_batch.hpp"

namespace ringtrain {
namespace {

// Pinned host memory, freed with the owner.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes) { RT_CUDA_CHECK(cudaMallocHost(&p_, bytes)); }
  ~PinnedBuffer() { cudaFreeHost(p_); }
  PinnedBuffer(PinnedBuffer&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

// What raw batches need on the device beyond the f32 path's buffers.
struct RawStage {
  std::int64_t crop_padding = 0;
  Tensor bytes, draws, table;  // device: [max_rows, C, H, W] u8, max_rows AugmentDraw, [C][256] f32
  PinnedBuffer pinned_bytes, pinned_draws;
};

class CudaDeviceBatch final : public DeviceBatch {
 public:
  CudaDeviceBatch(std::int64_t max_rows, const Shape& sample, DType input, std::int64_t labels_per_row,
                  const GpuAugment* augment)
      : act_(Tensor::empty(sample.with_batch(max_rows), input, Device::cuda)),
        labels_(Tensor::empty(Shape{max_rows * labels_per_row}, DType::i32, Device::cuda)),
        labels_per_row_(labels_per_row),
        pinned_labels_(labels_.nbytes()) {
    RT_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
    RT_CUDA_CHECK(cudaEventCreateWithFlags(&consumed_, cudaEventDisableTiming));
    written_on_copy_stream(labels_);
    if (augment != nullptr) set_up_raw(max_rows, sample, *augment);
  }
  ~CudaDeviceBatch() override {
    cudaEventDestroy(consumed_);
    cudaEventDestroy(copied_);
  }
  CudaDeviceBatch(const CudaDeviceBatch&) = delete;
  CudaDeviceBatch& operator=(const CudaDeviceBatch&) = delete;

  PlacedBatch upload(const Tensor& x, const std::int32_t* labels) override {
    const std::int64_t n = x.shape()[0];
    const DType host = act_.dtype() == DType::i32 ? DType::i32 : DType::f32;  // token ids stay ids
    RT_REQUIRE(x.device() == Device::cpu && x.dtype() == host && n <= act_.shape()[0], Error,
               "DeviceBatch: expected at most {} host {} rows, got {} {} rows", act_.shape()[0], dtype_name(host),
               dtype_name(x.dtype()), n);
    if (pinned_x_.get() == nullptr) {  // on first use: a DeviceBatch for raw batches may never need it
      pinned_x_ = PinnedBuffer(static_cast<std::size_t>(act_.numel()) * dtype_size(host));
      staged_ = act_.dtype() == host ? act_ : Tensor::empty(act_.shape(), host, Device::cuda);
      written_on_copy_stream(staged_);
    }
    const cudaStream_t compute =
        copy_in({Part{staged_.raw(), pinned_x_.get(), x.raw(), x.nbytes()}, labels_part(labels, n)});
    if (act_.raw() != staged_.raw())
      kernels::launch_cast(staged_.raw(), DType::f32, act_.raw(), act_.dtype(), x.numel(), compute);
    return PlacedBatch{act_.rows(0, n), labels_.data<std::int32_t>()};
  }

  PlacedBatch upload_raw(const Tensor& raw, const AugmentDraw* draws, const std::int32_t* labels) override {
    RT_REQUIRE(raw_ != nullptr, Error, "DeviceBatch: a raw batch, but this one was made without GPU augmentation");
    const std::int64_t n = raw.shape()[0];
    const Shape& shape = act_.shape();
    RT_REQUIRE(raw.device() == Device::cpu && raw.dtype() == DType::u8 && n <= shape[0] &&
                   raw.numel() == n * shape[1] * shape[2] * shape[3],
               Error, "DeviceBatch: expected at most {} host u8 rows of {}, got {} {} rows of {} elements", shape[0],
               shape.str(), dtype_name(raw.dtype()), n, n > 0 ? raw.numel() / n : 0);
    const std::size_t draw_bytes = static_cast<std::size_t>(n) * sizeof(AugmentDraw);
    const cudaStream_t compute =
        copy_in({Part{raw_->bytes.raw(), raw_->pinned_bytes.get(), raw.raw(), raw.nbytes()},
                 Part{raw_->draws.raw(), raw_->pinned_draws.get(), draws, draw_bytes}, labels_part(labels, n)});
    kernels::launch_augment_u8(raw_->bytes.data<std::uint8_t>(), raw_->draws.data<AugmentDraw>(),
                               raw_->table.data<float>(), n, shape[1], shape[2], shape[3], raw_->crop_padding,
                               act_.raw(), act_.dtype(), compute);
    return PlacedBatch{act_.rows(0, n), labels_.data<std::int32_t>()};
  }

 private:
  // One host array to copy: host -> pinned -> device.
  struct Part {
    void* device;
    void* pinned;
    const void* host;
    std::size_t bytes;
  };

  // A device buffer the copy stream writes: the pool hands its memory out again (after this
  // DeviceBatch is gone) only once that stream's work is done.
  void written_on_copy_stream(const Tensor& buffer) const {
    if (buffer.raw() != nullptr) gpu("DeviceBatch").pool().record_stream(buffer.raw(), copy_stream_);
  }

  Part labels_part(const std::int32_t* labels, std::int64_t n) const {
    return Part{labels_.raw(), pinned_labels_.get(), labels,
                static_cast<std::size_t>(n * labels_per_row_) * sizeof(std::int32_t)};
  }

  // Copies the parts to the device on the copy stream and orders the compute stream (returned)
  // after them, without waiting on the host for anything but the previous batch's copy.
  cudaStream_t copy_in(std::initializer_list<Part> parts) {
    // The previous batch's copy must be done before the staging buffers are overwritten.
    RT_CUDA_CHECK(cudaEventSynchronize(copied_));
    for (const Part& p : parts) std::memcpy(p.pinned, p.host, p.bytes);
    // ... and the device work queued so far (which may still read the previous batch) first.
    const cudaStream_t compute = cuda::compute_stream();
    RT_CUDA_CHECK(cudaEventRecord(consumed_, compute));
    RT_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, consumed_, 0));
    for (const Part& p : parts)
      RT_CUDA_CHECK(cudaMemcpyAsync(p.device, p.pinned, p.bytes, cudaMemcpyHostToDevice, copy_stream_));
    RT_CUDA_CHECK(cudaEventRecord(copied_, copy_stream_));
    RT_CUDA_CHECK(cudaStreamWaitEvent(compute, copied_, 0));
    return compute;
  }

  void set_up_raw(std::int64_t max_rows, const Shape& sample, const GpuAugment& augment) {
    RT_REQUIRE(sample.rank() == 3, Error, "DeviceBatch: GPU augmentation needs [C, H, W] samples, got {}",
               sample.str());
    raw_ = std::make_unique<RawStage>();
    raw_->crop_padding = augment.crop_padding;
    raw_->bytes = Tensor::empty(sample.with_batch(max_rows), DType::u8, Device::cuda);
    const auto draw_bytes = static_cast<std::int64_t>(static_cast<std::size_t>(max_rows) * sizeof(AugmentDraw));
    raw_->draws = Tensor::empty(Shape{draw_bytes}, DType::u8, Device::cuda);
    written_on_copy_stream(raw_->bytes);
    written_on_copy_stream(raw_->draws);
    raw_->pinned_bytes = PinnedBuffer(raw_->bytes.nbytes());
    raw_->pinned_draws = PinnedBuffer(raw_->draws.nbytes());
    const std::vector<float> table = data::u8_table(augment.normalize, sample[0]);
    raw_->table = Tensor::empty(Shape{static_cast<std::int64_t>(table.size())}, DType::f32, Device::cuda);
    // Once, synchronously on the legacy stream: after the memset that zeroed the new tensor there
    // (the non-blocking copy stream would not be ordered after it).
    RT_CUDA_CHECK(cudaMemcpy(raw_->table.raw(), table.data(), table.size() * sizeof(float), cudaMemcpyHostToDevice));
  }

  Tensor act_, labels_;
  std::int64_t labels_per_row_ = 1;
  Tensor staged_;          // host batches: their device copy (act_ itself when no cast is needed)
  PinnedBuffer pinned_x_;  // f32 batches: their staging; both made on the first f32 upload
  PinnedBuffer pinned_labels_;
  std::unique_ptr<RawStage> raw_;  // null unless made with a GpuAugment
  const cudaStream_t copy_stream_ = cuda::copy_stream();
  cudaEvent_t copied_ = nullptr;
  cudaEvent_t consumed_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceBatch> cuda::CudaBackend::make_device_batch(std::int64_t max_rows, const Shape& sample,
                                                                  DType input, std::int64_t labels_per_row,
                                                                  const GpuAugment* augment) const {
  return std::make_unique<CudaDeviceBatch>(max_rows, sample, input, labels_per_row, augment);
}

}  // namespace ringtrain
