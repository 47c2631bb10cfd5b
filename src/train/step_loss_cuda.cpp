// The CUDA StepLoss: the fused softmax cross-entropy kernel and its deterministic sums; labels
// go to the device with the logits' stream, the two sums come back in sums().
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "kernels/loss_kernels.hpp"
#include "train/step_loss.hpp"

namespace ringtrain {
namespace {

class CudaStepLoss final : public StepLoss {
 public:
  explicit CudaStepLoss(std::int64_t max_rows)
      : labels_(Tensor::empty(Shape{max_rows}, DType::i32, Device::cuda)),
        row_loss_(Tensor::empty(Shape{max_rows}, DType::f32, Device::cuda)),
        row_correct_(Tensor::empty(Shape{max_rows}, DType::i32, Device::cuda)),
        out_(Tensor::empty(Shape{2}, DType::f64, Device::cuda)) {}

  void compute(const Tensor& logits, const std::int32_t* labels, Tensor& dlogits, float loss_scale) override {
    const std::int64_t n = logits.shape()[0], k = logits.shape()[1];
    RT_REQUIRE(n <= labels_.numel(), Error, "CudaStepLoss: batch of {} rows, sized for {}", n, labels_.numel());
    RT_CUDA_CHECK(cudaMemcpy(labels_.raw(), labels, static_cast<std::size_t>(n) * sizeof(std::int32_t),
                             cudaMemcpyHostToDevice));
    kernels::launch_softmax_xent(logits.raw(), logits.dtype(), labels_.data<std::int32_t>(), n, k,
                                 loss_scale / static_cast<float>(n),
                                 dlogits.raw(), row_loss_.f32(), row_correct_.data<std::int32_t>(), nullptr);
    kernels::launch_loss_sums(row_loss_.f32(), row_correct_.data<std::int32_t>(), n, out_.data<double>(), nullptr);
  }

  LossSums sums() override {
    double host[2] = {0.0, 0.0};
    RT_CUDA_CHECK(cudaMemcpy(host, out_.raw(), sizeof(host), cudaMemcpyDeviceToHost));
    return LossSums{host[0], host[1]};
  }

 private:
  Tensor labels_, row_loss_, row_correct_, out_;
};

}  // namespace

std::unique_ptr<StepLoss> make_cuda_step_loss(std::int64_t max_rows) { return std::make_unique<CudaStepLoss>(max_rows); }

}  // namespace ringtrain
