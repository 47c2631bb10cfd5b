// The CUDA StepLoss: the fused softmax cross-entropy kernel and its deterministic sums on the
// compute stream (capturable: no host transfer in compute()); the two sums come back in sums().
#include <cuda_runtime.h>

#include "cuda/compute_stream.hpp"
#include "check/cuda_check.hpp"
#include "cuda/cuda_backend.hpp"
#include "kernels/loss_kernels.hpp"
#include "train/step_loss.hpp"

namespace ringtrain {
namespace {

class CudaStepLoss final : public StepLoss {
 public:
  explicit CudaStepLoss(std::int64_t max_rows)
      : row_loss_(Tensor::empty(Shape{max_rows}, DType::f32, Device::cuda)),
        row_correct_(Tensor::empty(Shape{max_rows}, DType::i32, Device::cuda)),
        out_(Tensor::empty(Shape{2}, DType::f64, Device::cuda)) {}

  void compute(const Tensor& logits, const std::int32_t* labels, Tensor& dlogits, float loss_scale) override {
    const std::int64_t n = logits.shape()[0], k = logits.shape()[1];
    RT_REQUIRE(n <= row_loss_.numel(), Error, "CudaStepLoss: batch of {} rows, sized for {}", n, row_loss_.numel());
    const cudaStream_t stream = cuda::compute_stream();
    kernels::launch_softmax_xent(logits.raw(), logits.dtype(), labels, n, k, loss_scale / static_cast<float>(n),
                                 dlogits.raw(), row_loss_.f32(), row_correct_.data<std::int32_t>(), stream);
    kernels::launch_loss_sums(row_loss_.f32(), row_correct_.data<std::int32_t>(), n, out_.data<double>(), stream);
  }

  LossSums sums() override {
    double host[2] = {0.0, 0.0};  // a synchronous copy on the legacy stream: waits for the compute stream
    RT_CUDA_CHECK(cudaMemcpy(host, out_.raw(), sizeof(host), cudaMemcpyDeviceToHost));
    return LossSums{host[0], host[1]};
  }

 private:
  Tensor row_loss_, row_correct_, out_;
};

}  // namespace

std::unique_ptr<StepLoss> cuda::CudaBackend::make_step_loss(std::int64_t max_rows) const {
  return std::make_unique<CudaStepLoss>(max_rows);
}

}  // namespace ringtrain
