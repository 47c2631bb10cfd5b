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
#include "tensor/device_ops.hpp"

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
struct CudaVersions;
struct VisibleGpu;
struct CudaGpu;
struct GemmProblem;

// The DeviceOps of Device::cuda (tensor/device_ops.hpp) are implemented by memory.cpp
// (allocate_zeroed from pool(), copy), reserved_memory.cpp (CUDA virtual memory management:
// reserve_pages, release_pages after a device synchronize, commit_pages), tensor_ops.cpp and
// optimizer_update.cpp (one kernel each, on the compute stream).
class GpuBackend : public DeviceOps {
 public:
  // Device binding (device.cpp): the visible GPUs (0 when there is no driver or no GPU), and
  // binding the calling thread to one.
  virtual int device_count() const = 0;
  virtual void set_device(int device) const = 0;

  // Device memory (memory.cpp). make_memory: cudaMalloc/cudaFree/cudaMemGetInfo on the device
  // current when it is made. pool: the process's caching pool on the device current at first
  // use (the rank's bound GPU), never destroyed (tensors may be released after main returns).
  // copy_bytes: cudaMemcpy between host and device (either side may be either), ordered on the
  // default stream; a copy to host memory returns when the bytes are there. mapped_bytes
  // (reserved_memory.cpp): the bytes of the reservation holding `data` that are mapped.
  virtual std::unique_ptr<DeviceMemory> make_memory() const = 0;
  virtual MemoryPool& pool() const = 0;
  virtual void copy_bytes(void* dst, bool dst_on_device, const void* src, bool src_on_device,
                          std::size_t bytes) const = 0;
  virtual std::int64_t mapped_bytes(const void* data) const = 0;
  // cast (tensor_ops.cpp, on the compute stream): n elements converted from `from` to `to`.
  virtual void cast(void* dst, DType to, const void* src, DType from, std::int64_t n) const = 0;

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
