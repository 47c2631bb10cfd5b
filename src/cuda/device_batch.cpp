// DeviceBatch on CUDA: the batch's parts staged in pinned memory and copied on the process's
// copy stream (cuda::copy_stream) into one of two landing buffers, in turn; place() orders the
// compute stream after that copy with an event, then copies or casts (f32 batches) or augments
// (raw uint8 batches) the landing into the one buffer the model reads, on the compute stream.
#include <cuda_runtime.h>

#include <array>
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

// One of the two landing buffers a batch is copied into: pinned host staging, the device copy,
// and the events that order it. Device buffers are made on first use (a DeviceBatch for raw
// batches may never see an f32 one).
struct Landing {
  Tensor x, labels, bytes, draws;  // device: host-dtype rows, labels; raw: u8 samples, AugmentDraws
  PinnedBuffer pinned_x, pinned_labels, pinned_bytes, pinned_draws;
  cudaEvent_t copied = nullptr;    // the copy into this landing (copy stream)
  cudaEvent_t consumed = nullptr;  // the compute work that last read it (compute stream)
  std::int64_t rows = 0;
  bool raw = false;
};

class CudaDeviceBatch final : public DeviceBatch {
 public:
  CudaDeviceBatch(std::int64_t max_rows, const Shape& sample, DType input, std::int64_t labels_per_row,
                  const GpuAugment* augment)
      : act_(Tensor::empty(sample.with_batch(max_rows), input, Device::cuda)),
        labels_(Tensor::empty(Shape{max_rows * labels_per_row}, DType::i32, Device::cuda)),
        labels_per_row_(labels_per_row),
        host_dtype_(input == DType::i32 ? DType::i32 : DType::f32) {  // token ids stay ids
    for (Landing& l : landings_) {
      RT_CUDA_CHECK(cudaEventCreateWithFlags(&l.copied, cudaEventDisableTiming));
      RT_CUDA_CHECK(cudaEventCreateWithFlags(&l.consumed, cudaEventDisableTiming));
      l.labels = device_buffer(labels_.shape(), DType::i32);
      l.pinned_labels = PinnedBuffer(static_cast<std::size_t>(labels_.nbytes()));
    }
    if (augment != nullptr) set_up_raw(sample, *augment);
    for (Landing& l : landings_) zeroed_before_copies(l);
  }
  ~CudaDeviceBatch() override {
    for (Landing& l : landings_) {
      cudaEventDestroy(l.consumed);
      cudaEventDestroy(l.copied);
    }
  }
  CudaDeviceBatch(const CudaDeviceBatch&) = delete;
  CudaDeviceBatch& operator=(const CudaDeviceBatch&) = delete;

  void stage(const Tensor& x, const std::int32_t* labels) override {
    const std::int64_t n = x.shape()[0];
    RT_REQUIRE(x.device() == Device::cpu && x.dtype() == host_dtype_ && n <= act_.shape()[0], Error,
               "DeviceBatch: expected at most {} host {} rows, got {} {} rows", act_.shape()[0],
               dtype_name(host_dtype_), dtype_name(x.dtype()), n);
    Landing& l = next_landing();
    if (l.x.raw() == nullptr) {
      l.x = device_buffer(act_.shape(), host_dtype_);
      l.pinned_x = PinnedBuffer(static_cast<std::size_t>(l.x.nbytes()));
      zeroed_before_copies(l);
    }
    copy_in(l, {Part{l.x.raw(), l.pinned_x.get(), x.raw(), x.nbytes()}, labels_part(l, labels, n)});
    l.rows = n;
    l.raw = false;
  }

  void stage_raw(const Tensor& raw, const AugmentDraw* draws, const std::int32_t* labels) override {
    RT_REQUIRE(raw_ != nullptr, Error, "DeviceBatch: a raw batch, but this one was made without GPU augmentation");
    const std::int64_t n = raw.shape()[0];
    const Shape& shape = act_.shape();
    RT_REQUIRE(raw.device() == Device::cpu && raw.dtype() == DType::u8 && n <= shape[0] &&
                   raw.numel() == n * shape[1] * shape[2] * shape[3],
               Error, "DeviceBatch: expected at most {} host u8 rows of {}, got {} {} rows of {} elements", shape[0],
               shape.str(), dtype_name(raw.dtype()), n, n > 0 ? raw.numel() / n : 0);
    Landing& l = next_landing();
    const std::size_t draw_bytes = static_cast<std::size_t>(n) * sizeof(AugmentDraw);
    copy_in(l, {Part{l.bytes.raw(), l.pinned_bytes.get(), raw.raw(), raw.nbytes()},
                Part{l.draws.raw(), l.pinned_draws.get(), draws, draw_bytes}, labels_part(l, labels, n)});
    l.rows = n;
    l.raw = true;
  }

  PlacedBatch place() override {
    RT_REQUIRE(staged_ >= 0, Error, "DeviceBatch: place() before any batch was staged");
    Landing& l = landings_[static_cast<std::size_t>(staged_)];
    const cudaStream_t compute = cuda::compute_stream();
    RT_CUDA_CHECK(cudaStreamWaitEvent(compute, l.copied, 0));
    const std::int64_t n = l.rows;
    if (l.raw) {
      const Shape& shape = act_.shape();
      kernels::launch_augment_u8(l.bytes.data<std::uint8_t>(), l.draws.data<AugmentDraw>(), raw_->table.data<float>(),
                                 n, shape[1], shape[2], shape[3], raw_->crop_padding, act_.raw(), act_.dtype(),
                                 compute);
    } else if (act_.dtype() == host_dtype_) {  // f32 activations, token ids
      const auto bytes = static_cast<std::size_t>(n * act_.shape().sample().numel()) * dtype_size(host_dtype_);
      if (bytes > 0) RT_CUDA_CHECK(cudaMemcpyAsync(act_.raw(), l.x.raw(), bytes, cudaMemcpyDeviceToDevice, compute));
    } else {
      kernels::launch_cast(l.x.raw(), DType::f32, act_.raw(), act_.dtype(), n * act_.shape().sample().numel(), compute);
    }
    const auto label_bytes = static_cast<std::size_t>(n * labels_per_row_) * sizeof(std::int32_t);
    if (label_bytes > 0)
      RT_CUDA_CHECK(cudaMemcpyAsync(labels_.raw(), l.labels.raw(), label_bytes, cudaMemcpyDeviceToDevice, compute));
    RT_CUDA_CHECK(cudaEventRecord(l.consumed, compute));  // the landing may be written again after this
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

  // The landing the batch before last used (the other one may still be read by queued work).
  Landing& next_landing() {
    staged_ = staged_ == 0 ? 1 : 0;
    return landings_[static_cast<std::size_t>(staged_)];
  }

  // New buffers are zeroed on the legacy default stream, which the non-blocking copy stream is
  // not ordered with: the landing's first copy waits for that (an event there, as `consumed`).
  static void zeroed_before_copies(Landing& l) { RT_CUDA_CHECK(cudaEventRecord(l.consumed, cudaStreamLegacy)); }

  // A device buffer the copy stream writes: the pool hands its memory out again (after this
  // DeviceBatch is gone) only once that stream's work is done.
  Tensor device_buffer(const Shape& shape, DType dtype) const {
    Tensor t = Tensor::empty(shape, dtype, Device::cuda);
    gpu("DeviceBatch").pool().record_stream(t.raw(), copy_stream_);
    return t;
  }

  Part labels_part(const Landing& l, const std::int32_t* labels, std::int64_t n) const {
    return Part{l.labels.raw(), l.pinned_labels.get(), labels,
                static_cast<std::size_t>(n * labels_per_row_) * sizeof(std::int32_t)};
  }

  // Copies the parts into landing l on the copy stream, after the compute work that last read l
  // (recorded by place(); the work queued since, on the other landing's batch, runs beside the
  // copy). The host waits only for l's previous copy out of its pinned buffers, long done.
  void copy_in(Landing& l, std::initializer_list<Part> parts) {
    RT_CUDA_CHECK(cudaEventSynchronize(l.copied));
    for (const Part& p : parts) std::memcpy(p.pinned, p.host, p.bytes);
    RT_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, l.consumed, 0));
    for (const Part& p : parts)
      if (p.bytes > 0)
        RT_CUDA_CHECK(cudaMemcpyAsync(p.device, p.pinned, p.bytes, cudaMemcpyHostToDevice, copy_stream_));
    RT_CUDA_CHECK(cudaEventRecord(l.copied, copy_stream_));
  }

  // What raw batches need: per landing the u8 samples and draws, and the decoding table.
  struct RawTable {
    std::int64_t crop_padding = 0;
    Tensor table;  // [C][256] f32
  };

  void set_up_raw(const Shape& sample, const GpuAugment& augment) {
    RT_REQUIRE(sample.rank() == 3, Error, "DeviceBatch: GPU augmentation needs [C, H, W] samples, got {}",
               sample.str());
    const std::int64_t max_rows = act_.shape()[0];
    for (Landing& l : landings_) {
      l.bytes = device_buffer(sample.with_batch(max_rows), DType::u8);
      const auto draw_bytes = static_cast<std::int64_t>(static_cast<std::size_t>(max_rows) * sizeof(AugmentDraw));
      l.draws = device_buffer(Shape{draw_bytes}, DType::u8);
      l.pinned_bytes = PinnedBuffer(static_cast<std::size_t>(l.bytes.nbytes()));
      l.pinned_draws = PinnedBuffer(static_cast<std::size_t>(l.draws.nbytes()));
    }
    raw_ = std::make_unique<RawTable>();
    raw_->crop_padding = augment.crop_padding;
    const std::vector<float> table = data::u8_table(augment.normalize, sample[0]);
    raw_->table = Tensor::empty(Shape{static_cast<std::int64_t>(table.size())}, DType::f32, Device::cuda);
    // Once, synchronously on the legacy stream: after the memset that zeroed the new tensor there
    // (the non-blocking copy stream would not be ordered after it).
    RT_CUDA_CHECK(cudaMemcpy(raw_->table.raw(), table.data(), table.size() * sizeof(float), cudaMemcpyHostToDevice));
  }

  Tensor act_, labels_;  // what the model reads: one fixed buffer each
  std::int64_t labels_per_row_ = 1;
  DType host_dtype_;  // of host batches: f32, or i32 token ids
  std::array<Landing, 2> landings_;
  int staged_ = -1;                // the landing staged last; -1: none yet
  std::unique_ptr<RawTable> raw_;  // null unless made with a GpuAugment
  const cudaStream_t copy_stream_ = cuda::copy_stream();
};

}  // namespace

std::unique_ptr<DeviceBatch> cuda::CudaBackend::make_device_batch(std::int64_t max_rows, const Shape& sample,
                                                                  DType input, std::int64_t labels_per_row,
                                                                  const GpuAugment* augment) const {
  return std::make_unique<CudaDeviceBatch>(max_rows, sample, input, labels_per_row, augment);
}

}  // namespace ringtrain
