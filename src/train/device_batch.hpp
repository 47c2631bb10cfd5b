// Private: DeviceBatch, how a host batch from the loader reaches the model's device for
// DataParallelStep and evaluation. On the GPU: staged in pinned host memory and copied on its own
// stream into one of two landing buffers (alternating, so the next batch's copy can run while
// the device still computes on this one), then copied or cast (f32 batches) or augmented and
// normalized (raw uint8 batches) on the compute stream into the one buffer the model reads (a
// fixed address, as a CUDA graph needs); the compute stream waits for the copy with an event, so
// the host never waits for the device here. On the CPU it passes through.
#pragma once
#include <cstdint>
#include <memory>

#include "ringtrain/data/augment.hpp"
#include "ringtrain/tensor/tensor.hpp"
#include "ringtrain/train/data_parallel_step.hpp"

namespace ringtrain {

// A batch where the model computes: x in the model's input dtype, its labels beside it.
struct PlacedBatch {
  Tensor x;
  const std::int32_t* labels = nullptr;
};

class DeviceBatch {
 public:
  virtual ~DeviceBatch() = default;
  // x: [n, ...] on the host, n <= max_rows, f32 (or the i32 token ids of a model that reads
  // tokens); labels: n x labels_per_row host entries. The result is valid until the next place().
  PlacedBatch upload(const Tensor& x, const std::int32_t* labels) {
    stage(x, labels);
    return place();
  }
  // A raw loader batch (LoaderOptions::raw): raw [n, C, H, W] uint8 on the host, draws and
  // labels n host entries. The same values upload() gives for the host-decoded batch. Only on
  // a DeviceBatch made with a GpuAugment; otherwise an Error.
  PlacedBatch upload_raw(const Tensor& raw, const AugmentDraw* draws, const std::int32_t* labels) {
    stage_raw(raw, draws, labels);
    return place();
  }
  // The halves of upload: stage() takes the host batch and starts its copy towards the device
  // without ordering the model's work after it, so it runs beside the work already queued (on
  // the GPU the host batch may be reused once stage returns; on the CPU the placed batch is the
  // host batch itself); place() puts the batch staged last where the model reads it, after the
  // device work queued so far.
  virtual void stage(const Tensor& x, const std::int32_t* labels) = 0;
  virtual void stage_raw(const Tensor& raw, const AugmentDraw* draws, const std::int32_t* labels) = 0;
  virtual PlacedBatch place() = 0;
};

// sample: the per-sample shape; input: the model's input dtype (the activation dtype f32, bf16
// or f16; i32 for token ids, uploaded as they are); labels_per_row: 1, or the positions of a
// language model's sample; augment: null, or what raw batches are decoded with (a GPU only: its
// table is uploaded here, once).
std::unique_ptr<DeviceBatch> make_device_batch(Device device, std::int64_t max_rows, const Shape& sample, DType input,
                                               std::int64_t labels_per_row, const GpuAugment* augment = nullptr);

}  // namespace ringtrain
