// make_cuda_layer_maker: the CUDA layers for build_model, all sharing one CudaCompute (handles,
// stream, dtype). Creating it fails with a clear error when no GPU is usable.
#include "nn/cuda/cuda_layers.hpp"
#include "ringtrain/core/error.hpp"
#include "nn/layer_maker.hpp"

namespace ringtrain {
namespace {

class CudaLayerMaker final : public LayerMaker {
 public:
  CudaLayerMaker(DType precision, bool tf32) : compute_(std::make_shared<cuda::CudaCompute>(precision, tf32)) {}
  std::unique_ptr<Layer> linear(std::int64_t out, bool bias, double init_std) override {
    return std::make_unique<cuda::CudaLinear>(compute_, out, bias, init_std);
  }
  std::unique_ptr<Layer> conv2d(const Conv2dOptions& o) override {
    return std::make_unique<cuda::CudaConv2d>(compute_, o);
  }
  std::unique_ptr<Layer> relu() override { return std::make_unique<cuda::CudaReLU>(compute_); }
  std::unique_ptr<Layer> maxpool2d(std::int64_t k, std::int64_t s) override {
    return std::make_unique<cuda::CudaMaxPool2d>(compute_, k, s);
  }
  std::unique_ptr<Layer> flatten() override { return std::make_unique<cuda::CudaFlatten>(compute_); }
  std::unique_ptr<Layer> dropout(double p, int index) override {
    return std::make_unique<cuda::CudaDropout>(compute_, p, index);
  }
  std::unique_ptr<Layer> batchnorm2d(double momentum, double eps) override {
    return std::make_unique<cuda::CudaBatchNorm2d>(compute_, momentum, eps);
  }
  std::unique_ptr<Layer> add() override { return std::make_unique<cuda::CudaAdd>(compute_); }
  std::unique_ptr<Layer> embedding(std::int64_t vocab, std::int64_t block, std::int64_t n_embd) override {
    return std::make_unique<cuda::CudaEmbedding>(compute_, vocab, block, n_embd);
  }
  std::unique_ptr<Layer> layernorm(double eps) override { return std::make_unique<cuda::CudaLayerNorm>(compute_, eps); }
  std::unique_ptr<Layer> gelu() override { return std::make_unique<cuda::CudaGelu>(compute_); }
  std::unique_ptr<Layer> attention(std::int64_t n_head) override {
    return std::make_unique<cuda::CudaCausalSelfAttention>(compute_, n_head);
  }

 private:
  cuda::ComputePtr compute_;
};

}  // namespace

std::unique_ptr<LayerMaker> make_cuda_layer_maker(DType precision, bool tf32) {
  RT_REQUIRE(precision == DType::f32 || precision == DType::bf16 || precision == DType::f16, ConfigError,
             "train.precision: the CUDA layers compute in f32, bf16 or f16, not {}", dtype_name(precision));
  return std::make_unique<CudaLayerMaker>(precision, tf32);
}

}  // namespace ringtrain
