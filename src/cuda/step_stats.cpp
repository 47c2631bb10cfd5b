// The CUDA DeviceStepStats (src/train/step_stats.hpp): a step's statistics gathered, decided and
// copied back on the compute stream with scaler_kernels' launchers, in the host's order of
// additions (so the decision is the host's from the same numbers); one pinned buffer and one
// event for the copy back.
#include <cuda_runtime.h>

#include <vector>

#include "check/cuda_check.hpp"
#include "cuda/compute_stream.hpp"
#include "cuda/cuda_backend.hpp"
#include "kernels/scaler_kernels.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/train/step_decision.hpp"
#include "train/step_loss.hpp"
#include "train/step_stats.hpp"

namespace ringtrain {
namespace {

class CudaStepStats final : public DeviceStepStats {
 public:
  CudaStepStats(const std::vector<std::vector<ArenaRange>>& shards, bool sums_here)
      : shards_(static_cast<int>(shards.size())), sums_here_(sums_here) {
    std::vector<std::int32_t> per_shard;
    for (const std::vector<ArenaRange>& shard : shards) {
      per_shard.push_back(static_cast<std::int32_t>(shard.size()));
      ranges_.insert(ranges_.end(), shard.begin(), shard.end());
    }
    const auto count = static_cast<std::int64_t>(kStepStatsHeader) + shards_;
    stats_ = Tensor::empty(Shape{count}, DType::f64, Device::cuda);
    flag_ = Tensor::empty(Shape{1}, DType::i32, Device::cuda);
    scale_ = Tensor::empty(Shape{1}, DType::f32, Device::cuda);
    partials_ = Tensor::empty(Shape{kernels::kSumSquaresBlocks}, DType::f64, Device::cuda);
    range_sums_ = Tensor::empty(Shape{std::max<std::int64_t>(1, static_cast<std::int64_t>(ranges_.size()))}, DType::f64,
                                Device::cuda);
    shard_ranges_ = Tensor::empty(Shape{std::max<std::int64_t>(1, shards_)}, DType::i32, Device::cuda);
    if (!per_shard.empty())
      RT_CUDA_CHECK(cudaMemcpy(shard_ranges_.raw(), per_shard.data(), per_shard.size() * sizeof(std::int32_t),
                               cudaMemcpyHostToDevice));
    RT_CUDA_CHECK(cudaMallocHost(&host_, static_cast<std::size_t>(count) * sizeof(double)));
    const cudaError_t rc = cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming);
    if (rc != cudaSuccess) (void)cudaFreeHost(host_);
    check::cuda(rc, "cudaEventCreateWithFlags(&copied_)", __FILE__, __LINE__);
  }

  ~CudaStepStats() override {
    (void)cudaEventDestroy(copied_);
    (void)cudaFreeHost(host_);
  }
  CudaStepStats(const CudaStepStats&) = delete;
  CudaStepStats& operator=(const CudaStepStats&) = delete;

  void gather(const StepLoss& loss, std::int64_t slots, double rows, const float* grads, std::int64_t n,
              bool check_nonfinite, bool sums) override {
    const double* loss_slots = loss.device_slots();
    RT_REQUIRE(loss_slots != nullptr, Error, "DeviceStepStats: the step's loss is not on the GPU");
    const cudaStream_t stream = cuda::compute_stream();
    RT_CUDA_CHECK(cudaMemsetAsync(flag_.raw(), 0, sizeof(std::int32_t), stream));
    if (check_nonfinite) kernels::launch_find_nonfinite(grads, n, flag_.data<std::int32_t>(), stream);
    const bool with_sums = sums && sums_here_;
    if (with_sums)
      for (std::size_t r = 0; r < ranges_.size(); ++r)
        kernels::launch_sum_squares(grads + ranges_[r].offset, ranges_[r].count, partials_.data<double>(),
                                    range_sums_.data<double>() + r, stream);
    kernels::launch_step_stats(loss_slots, slots, rows, flag_.data<std::int32_t>(), range_sums_.data<double>(),
                               shard_ranges_.data<std::int32_t>(), shards_, with_sums, stats_.data<double>(), stream);
  }

  double* stats() override { return stats_.data<double>(); }
  std::int64_t size() const override { return stats_.numel(); }

  const float* decide(double world_k, double loss_scale, double clip) override {
    kernels::launch_decide_step(stats_.data<double>(), shards_, world_k, loss_scale, clip, scale_.f32(),
                                cuda::compute_stream());
    return scale_.f32();
  }

  void copy_to_host() override {
    const cudaStream_t stream = cuda::compute_stream();
    RT_CUDA_CHECK(cudaMemcpyAsync(host_, stats_.raw(), static_cast<std::size_t>(stats_.nbytes()),
                                  cudaMemcpyDeviceToHost, stream));
    RT_CUDA_CHECK(cudaEventRecord(copied_, stream));
  }

  std::vector<double> read() override {
    RT_CUDA_CHECK(cudaEventSynchronize(copied_));
    return {host_, host_ + stats_.numel()};
  }

 private:
  int shards_;
  bool sums_here_;
  std::vector<ArenaRange> ranges_;  // every shard's ranges, shard after shard
  Tensor stats_, flag_, scale_, partials_, range_sums_, shard_ranges_;
  double* host_ = nullptr;  // pinned
  cudaEvent_t copied_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceStepStats> cuda::CudaBackend::make_step_stats(const std::vector<std::vector<ArenaRange>>& shards,
                                                                    bool sums_here) const {
  return std::make_unique<CudaStepStats>(shards, sums_here);
}

}  // namespace ringtrain
