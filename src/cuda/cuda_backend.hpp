// CudaBackend: the GpuBackend of a CUDA build. Each of this folder's files implements the
// methods of one concern (device.cpp, memory.cpp, reserved_memory.cpp, tensor_ops.cpp, optimizer_update.cpp,
// step_loss.cpp, step_stats.cpp, device_batch.cpp, step_graph.cpp, host_staged_communicator.cpp, versions.cpp,
// gemm_timing.cpp;
// cuda_backend.cpp: the layer maker and the instance). Private to src/cuda.
#pragma once
#include "cuda/gpu_backend.hpp"

namespace ringtrain::cuda {

class CudaBackend final : public GpuBackend {
 public:
  int device_count() const override;
  void set_device(int device) const override;

  std::unique_ptr<DeviceMemory> make_memory() const override;
  MemoryPool& pool() const override;
  std::shared_ptr<void> allocate_zeroed(std::size_t bytes) const override;
  void copy_bytes(void* dst, bool dst_on_device, const void* src, bool src_on_device, std::size_t bytes) const override;
  void copy(void* dst, const void* src, std::size_t bytes) const override;
  std::shared_ptr<void> reserve_pages(std::size_t bytes) const override;
  std::int64_t release_pages(void* data, std::size_t bytes) const override;
  void commit_pages(void* data, std::size_t bytes) const override;
  std::int64_t mapped_bytes(const void* data) const override;

  void add_into(void* dst, const void* src, std::int64_t n, DType dtype) const override;
  void zero(void* dst, std::size_t bytes) const override;
  void add_into_each(float* const* dsts, int count, const float* src, std::int64_t n) const override;
  bool has_nonfinite(const float* x, std::int64_t n) const override;
  void cast(void* dst, DType to, const void* src, DType from, std::int64_t n) const override;
  double sum_of_squares(const float* x, std::int64_t n) const override;
  void synchronize() const override;

  void sgd_update(float* params, const float* grads, float* velocity, std::int64_t n, float grad_scale,
                  const float* device_scale, const ComputeCopyOut& copy, const SgdHyper& hyper) const override;
  void adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, float grad_scale,
                    const float* device_scale, const ComputeCopyOut& copy, const AdamWHyper& hyper) const override;
  void apply_mask(float* x, const float* mask, std::int64_t n) const override;

  std::unique_ptr<LayerMaker> make_layer_maker(DType precision, bool tf32) const override;
  std::unique_ptr<StepLoss> make_step_loss(std::int64_t max_rows, std::int64_t slots) const override;
  std::unique_ptr<DeviceStepStats> make_step_stats(const std::vector<std::vector<ArenaRange>>& shards,
                                                   bool sums_here) const override;
  std::unique_ptr<DeviceBatch> make_device_batch(std::int64_t max_rows, const Shape& sample, DType input,
                                                 std::int64_t labels_per_row, const GpuAugment* augment) const override;
  std::unique_ptr<StepGraph> make_step_graph() const override;

  std::unique_ptr<Communicator> stage_through_host(std::unique_ptr<Communicator> host) const override;

  CudaVersions versions() const override;
  std::vector<VisibleGpu> visible_gpus(std::string* why) const override;
  CudaGpu current_gpu() const override;
  std::vector<std::vector<double>> time_gemm_candidates(const GemmProblem& problem, int repeats,
                                                        int calls) const override;
};

}  // namespace ringtrain::cuda
