// The CUDA StepLoss: the fused softmax cross-entropy kernel and its deterministic sums on the
// compute stream (capturable: no host transfer in compute()), each micro-batch's two sums in its
// slot of a device array; sums() copies the step's slots back (one wait) and adds them in order.
#include <cuda_runtime.h>

#include <vector>

#include "cuda/compute_stream.hpp"
#include "check/cuda_check.hpp"
#include "cuda/cuda_backend.hpp"
#include "kernels/loss_kernels.hpp"
#include "train/step_loss.hpp"

namespace ringtrain {
namespace {

class CudaStepLoss final : public StepLoss {
 public:
  CudaStepLoss(std::int64_t max_rows, std::int64_t slots)
      : row_loss_(Tensor::empty(Shape{max_rows}, DType::f32, Device::cuda)),
        row_correct_(Tensor::empty(Shape{max_rows}, DType::i32, Device::cuda)),
        out_(Tensor::empty(Shape{2 * slots}, DType::f64, Device::cuda)) {}

  void compute(const Tensor& logits, const std::int32_t* labels, Tensor& dlogits, float loss_scale,
               std::int64_t slot) override {
    const std::int64_t n = logits.shape()[0], k = logits.shape()[1];
    RT_REQUIRE(n <= row_loss_.numel(), Error, "CudaStepLoss: batch of {} rows, sized for {}", n, row_loss_.numel());
    RT_REQUIRE(slot >= 0 && 2 * slot < out_.numel(), Error, "CudaStepLoss: slot {} of {}", slot, out_.numel() / 2);
    const cudaStream_t stream = cuda::compute_stream();
    kernels::launch_softmax_xent(logits.raw(), logits.dtype(), labels, n, k, loss_scale / static_cast<float>(n),
                                 dlogits.raw(), row_loss_.f32(), row_correct_.data<std::int32_t>(), stream);
    kernels::launch_loss_sums(row_loss_.f32(), row_correct_.data<std::int32_t>(), n, out_.data<double>() + 2 * slot,
                              stream);
  }

  const double* device_slots() const override { return out_.data<double>(); }

  LossSums sums(std::int64_t count) override {
    RT_REQUIRE(count >= 0 && 2 * count <= out_.numel(), Error, "CudaStepLoss: {} slots of {}", count, out_.numel() / 2);
    std::vector<double> host(static_cast<std::size_t>(2 * count));
    // A synchronous copy on the legacy stream: waits for the compute stream's queued work.
    if (count > 0)
      RT_CUDA_CHECK(cudaMemcpy(host.data(), out_.raw(), host.size() * sizeof(double), cudaMemcpyDeviceToHost));
    LossSums total;
    for (std::size_t i = 0; i < host.size(); i += 2) {
      total.loss += host[i];
      total.correct += host[i + 1];
    }
    return total;
  }

 private:
  Tensor row_loss_, row_correct_, out_;
};

}  // namespace

std::unique_ptr<StepLoss> cuda::CudaBackend::make_step_loss(std::int64_t max_rows, std::int64_t slots) const {
  return std::make_unique<CudaStepLoss>(max_rows, slots);
}

}  // namespace ringtrain
