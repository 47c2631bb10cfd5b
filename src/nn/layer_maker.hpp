// Private: LayerMaker, the one place a compute backend plugs its layers into build_model. The
// builder parses [[model.layers]] and asks the maker for each layer; the CUDA maker comes from
// src/nn/cuda, reached through the GPU backend (cuda/gpu_backend.hpp; NotCompiled without CUDA).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ringtrain/nn/layers.hpp"
#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain {

class LayerMaker {
 public:
  virtual ~LayerMaker() = default;
  // init_std > 0: GPT-2's initialisation (see Linear)
  virtual std::unique_ptr<Layer> linear(std::int64_t out_features, bool bias, double init_std = 0.0) = 0;
  virtual std::unique_ptr<Layer> conv2d(const Conv2dOptions& options) = 0;
  virtual std::unique_ptr<Layer> relu() = 0;
  virtual std::unique_ptr<Layer> maxpool2d(std::int64_t kernel, std::int64_t stride) = 0;
  virtual std::unique_ptr<Layer> flatten() = 0;
  virtual std::unique_ptr<Layer> dropout(double p, int layer_index) = 0;
  virtual std::unique_ptr<Layer> batchnorm2d(double momentum, double eps) = 0;
  virtual std::unique_ptr<Layer> add() = 0;
  virtual std::unique_ptr<Layer> embedding(std::int64_t vocab_size, std::int64_t block_size, std::int64_t n_embd) = 0;
  virtual std::unique_ptr<Layer> layernorm(double eps) = 0;
  virtual std::unique_ptr<Layer> gelu() = 0;
  virtual std::unique_ptr<Layer> attention(std::int64_t n_head) = 0;
};

std::unique_ptr<LayerMaker> make_cpu_layer_maker();
// The CPU convolution layer: oneDNN's in a build with RINGTRAIN_WITH_ONEDNN, else Conv2d;
// cpu_conv2d_library says which ("oneDNN 2.6.3 (avx512_core)", "im2col + OpenBLAS").
std::unique_ptr<Layer> make_cpu_conv2d(const Conv2dOptions& options);
std::string cpu_conv2d_library();
// Layers computing on the current CUDA device with activations of `precision` (f32, bf16,
// f16); tf32 lets f32 GEMMs and convolutions use TF32 tensor cores. CUDA builds only.
std::unique_ptr<LayerMaker> make_cuda_layer_maker(DType precision, bool tf32);

}  // namespace ringtrain
