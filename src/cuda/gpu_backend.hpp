// GpuBackend: every GPU operation the rest of ringtrain calls, as one object. A CUDA build
// holds CudaBackend (src/cuda/cuda_backend.hpp, implemented by this folder's files, one concern
// each); a build without CUDA holds none, and gpu() then throws NotCompiled naming what was
// asked for. Code outside src/cuda reaches the GPU only through gpu(), so the backend is chosen
// in one place (compiled_gpu_backend) and no other file needs a stub or an #ifdef. Host-only
// header: no CUDA types.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

class Communicator;
class DeviceMemory;
class MemoryPool;
class LayerMaker;
class StepLoss;
class DeviceBatch;
class StepGraph;
class DeviceStepStats;
struct ArenaRange;
struct GpuAugment;
struct SgdHyper;
struct AdamWHyper;
struct ComputeCopyOut;
struct CudaVersions;
struct VisibleGpu;
struct CudaGpu;
struct GemmProblem;

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;

  // Device binding (device.cpp): the visible GPUs (0 when there is no driver or no GPU), and
  // binding the calling thread to one.
  virtual int device_count() const = 0;
  virtual void set_device(int device) const = 0;

  // Device memory (memory.cpp). make_memory: cudaMalloc/cudaFree/cudaMemGetInfo on the device
  // current when it is made. pool: the process's caching pool on the device current at first
  // use (the rank's bound GPU), never destroyed (tensors may be released after main returns).
  // allocate_zeroed: `bytes` zeroed bytes from pool(), returned to it when the last owner lets
  // go. copy_bytes: cudaMemcpy between host and device (either side may be either), ordered on
  // the default stream; a copy to host memory returns when the bytes are there.
  virtual std::unique_ptr<DeviceMemory> make_memory() const = 0;
  virtual MemoryPool& pool() const = 0;
  virtual std::shared_ptr<void> allocate_zeroed(std::size_t bytes) const = 0;
  virtual void copy_bytes(void* dst, bool dst_on_device, const void* src, bool src_on_device,
                          std::size_t bytes) const = 0;
  // Reserved memory (reserved_memory.cpp, CUDA virtual memory management): reserve_pages gives
  // `bytes` of address space, mapped and zeroed, freed when the last owner lets go;
  // release_pages unmaps the whole granules inside [data, data + bytes) of such memory (after a
  // device synchronize) and returns the bytes unmapped; commit_pages maps again every granule
  // that overlaps the range (contents unspecified); mapped_bytes: the bytes of the reservation
  // holding `data` that are mapped.
  virtual std::shared_ptr<void> reserve_pages(std::size_t bytes) const = 0;
  virtual std::int64_t release_pages(void* data, std::size_t bytes) const = 0;
  virtual void commit_pages(void* data, std::size_t bytes) const = 0;
  virtual std::int64_t mapped_bytes(const void* data) const = 0;

  // tensor_ops on the device (tensor_ops.cpp), on the compute stream; synchronize waits for
  // the whole device. zero: `bytes` zero bytes at dst.
  virtual void add_into(void* dst, const void* src, std::int64_t n, DType dtype) const = 0;
  virtual void zero(void* dst, std::size_t bytes) const = 0;
  virtual void add_into_each(float* const* dsts, int count, const float* src, std::int64_t n) const = 0;
  virtual bool has_nonfinite(const float* x, std::int64_t n) const = 0;
  virtual void cast(void* dst, DType to, const void* src, DType from, std::int64_t n) const = 0;
  virtual double sum_of_squares(const float* x, std::int64_t n) const = 0;
  virtual void synchronize() const = 0;

  // The fused optimizer updates over a whole arena and the pruning mask (optimizer_update.cpp):
  // one kernel each, on the compute stream. device_scale: null, or a device f32 the gradients
  // are also scaled by, 0 skipping the update (kernels/optimizer_kernels.hpp). apply_mask:
  // x[i] = 0 where mask[i] == 0.
  // copy: where the updated parameters also go in the compute dtype (update_rules.hpp).
  virtual void sgd_update(float* params, const float* grads, float* velocity, std::int64_t n, float grad_scale,
                          const float* device_scale, const ComputeCopyOut& copy, const SgdHyper& hyper) const = 0;
  virtual void adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, float grad_scale,
                            const float* device_scale, const ComputeCopyOut& copy, const AdamWHyper& hyper) const = 0;
  virtual void apply_mask(float* x, const float* mask, std::int64_t n) const = 0;

  // The parts of a training step (src/nn/cuda's layers; step_loss.cpp, device_batch.cpp,
  // step_graph.cpp here); their interfaces say what each does.
  virtual std::unique_ptr<LayerMaker> make_layer_maker(DType precision, bool tf32) const = 0;
  virtual std::unique_ptr<StepLoss> make_step_loss(std::int64_t max_rows, std::int64_t slots) const = 0;
  virtual std::unique_ptr<DeviceBatch> make_device_batch(std::int64_t max_rows, const Shape& sample, DType input,
                                                         std::int64_t labels_per_row,
                                                         const GpuAugment* augment) const = 0;
  virtual std::unique_ptr<StepGraph> make_step_graph() const = 0;
  // shards: per rank, the arena ranges of its shard of the gradients; sums_here: whether this
  // rank's sums of squares count (src/train/step_stats.hpp).
  virtual std::unique_ptr<DeviceStepStats> make_step_stats(const std::vector<std::vector<ArenaRange>>& shards,
                                                           bool sums_here) const = 0;

  // The gradient communicator of a GPU rank without NCCL (host_staged_communicator.cpp): `host`
  // (MPI, host buffers) made to take device buffers, each collective's buffer staged through
  // pinned memory with asynchronous copies on a copy stream.
  virtual std::unique_ptr<Communicator> stage_through_host(std::unique_ptr<Communicator> host) const = 0;

  // Tools (versions.cpp, gemm_timing.cpp): `ringtrain doctor`'s versions and visible GPUs (never throws for a
  // missing driver or GPU: *why says what is missing), and `bench gemm`'s bound GPU and timings
  // (src/bench/bench_gemm_cuda.hpp says what they measure).
  virtual CudaVersions versions() const = 0;
  virtual std::vector<VisibleGpu> visible_gpus(std::string* why) const = 0;
  virtual CudaGpu current_gpu() const = 0;
  virtual std::vector<std::vector<double>> time_gemm_candidates(const GemmProblem& problem, int repeats,
                                                                int calls) const = 0;
};

// The GPU backend compiled into this build; nullptr in a build without CUDA.
const GpuBackend* compiled_gpu_backend();

// compiled_gpu_backend(), or NotCompiled: "<what>: this ringtrain was built without CUDA ...".
const GpuBackend& gpu(std::string_view what);

}  // namespace ringtrain
