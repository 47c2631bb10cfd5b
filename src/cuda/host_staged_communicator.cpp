// A host (MPI) communicator for device buffers, the gradient path of GPU ranks without NCCL:
// each collective copies its buffer into pinned host memory on a copy stream once the device
// work queued so far is done, runs the host collective there, and copies the result back; the
// call returns when the result is on the device. Bucket by bucket, so the copies overlap
// backward the way the collectives do (ZeRO's reduce-scatter and allgather too). Collectives
// run one at a time (the communication thread or the caller), so one pinned buffer, grown to the
// largest, serves them all.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <utility>

#include "check/cuda_check.hpp"
#include "cuda/cuda_backend.hpp"
#include "ringtrain/comm/communicator.hpp"

namespace ringtrain::cuda {
namespace {

class HostStagedCommunicator final : public Communicator {
 public:
  explicit HostStagedCommunicator(std::unique_ptr<Communicator> host)
      : host_(std::move(host)), name_(std::string(host_->name()) + "+pinned") {
    RT_CUDA_CHECK(cudaGetDevice(&device_));
    RT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    RT_CUDA_CHECK(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming));
  }
  ~HostStagedCommunicator() override {
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
    cudaEventDestroy(inputs_ready_);
    cudaStreamDestroy(stream_);
  }
  HostStagedCommunicator(const HostStagedCommunicator&) = delete;
  HostStagedCommunicator& operator=(const HostStagedCommunicator&) = delete;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string_view name() const override { return name_; }
  bool device_memory() const override { return true; }
  bool calls_mpi() const override { return host_->calls_mpi(); }
  std::size_t staging_bytes() const override { return capacity_; }

  void allreduce_sum(void* data, std::size_t count, DType dtype) override {
    through_host(data, count * dtype_size(dtype), [&](void* host) { host_->allreduce_sum(host, count, dtype); });
  }

  // ZeRO's halves: the whole buffer staged both ways (the unspecified rest of a reduce-scatter
  // included), so the host communicator sees the layout it would see on host memory.
  void reduce_scatter_sum(void* data, std::size_t count, DType dtype) override {
    through_host(data, count * dtype_size(dtype), [&](void* host) { host_->reduce_scatter_sum(host, count, dtype); });
  }

  void allgather(void* data, std::size_t count, DType dtype) override {
    through_host(data, count * dtype_size(dtype), [&](void* host) { host_->allgather(host, count, dtype); });
  }

  void broadcast(void* data, std::size_t bytes, int root) override {
    through_host(data, bytes, [&](void* host) { host_->broadcast(host, bytes, root); });
  }

  void barrier() override { host_->barrier(); }

 private:
  // The host collective run on a pinned copy of the `bytes` at device `data`, the result copied back.
  template <typename HostCollective>
  void through_host(void* data, std::size_t bytes, HostCollective&& collective) {
    void* host = stage_in(data, bytes);
    collective(host);
    stage_out(data, host, bytes);
  }

  // `bytes` at device `data` in the pinned buffer, once the device work queued so far (on the
  // legacy stream and every blocking stream, the compute stream among them) has written them.
  void* stage_in(const void* data, std::size_t bytes) {
    check::bind_thread_to_device(device_);  // collectives may come from the communication thread
    if (bytes > capacity_) {
      if (pinned_ != nullptr) RT_CUDA_CHECK(cudaFreeHost(pinned_));
      pinned_ = nullptr;
      capacity_ = 0;
      RT_CUDA_CHECK(cudaMallocHost(&pinned_, bytes));
      capacity_ = bytes;
    }
    RT_CUDA_CHECK(cudaEventRecord(inputs_ready_, cudaStreamLegacy));
    RT_CUDA_CHECK(cudaStreamWaitEvent(stream_, inputs_ready_, 0));
    if (bytes > 0) RT_CUDA_CHECK(cudaMemcpyAsync(pinned_, data, bytes, cudaMemcpyDeviceToHost, stream_));
    RT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return pinned_;
  }

  // The collective's result back at device `data`; returns when it is there.
  void stage_out(void* data, const void* host, std::size_t bytes) {
    if (bytes > 0) RT_CUDA_CHECK(cudaMemcpyAsync(data, host, bytes, cudaMemcpyHostToDevice, stream_));
    RT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  std::unique_ptr<Communicator> host_;
  std::string name_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t inputs_ready_ = nullptr;
  void* pinned_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> CudaBackend::stage_through_host(std::unique_ptr<Communicator> host) const {
  return std::make_unique<HostStagedCommunicator>(std::move(host));
}

}  // namespace ringtrain::cuda
