// cuDNN wrappers for the CUDA layers: convolution, max pooling and spatial batch norm on NCHW
// tensors (cuDNN's legacy descriptor API). Each op holds its descriptors (and, for
// convolution, its algorithms and workspace) for one batch size; the stream is set per call.
// Semantics match the CPU layers in src/nn/ (tested in tests/cuda/nn).
#pragma once
#include <cudnn.h>

#include <cstddef>
#include <cstdint>

#include "nn/cuda/device_buffer.hpp"
#include "nn/cuda/math_mode.hpp"
#include "nn/cuda/owned.hpp"
#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain::cuda {

// One per model (its layers share it); the ops below keep a reference to it, so it must
// outlive them. Throws Error when cuDNN cannot start (no GPU or driver).
class Cudnn {
 public:
  Cudnn();
  cudnnHandle_t get() const { return handle_.get(); }
  // The handle with its stream set to `stream` (a cudaStream_t; nullptr is the default stream).
  cudnnHandle_t on(void* stream) const;
  // The workspace every op of the model uses (one at a time, on the model's stream).
  SharedWorkspace& workspace() { return workspace_; }

 private:
  Owned<cudnnHandle_t, cudnnDestroy> handle_;
  SharedWorkspace workspace_;
};

struct ConvGeometry {  // NCHW input, square kernel, symmetric zero padding
  std::int64_t n, c, h, w, out_channels, kernel, stride, padding;
};

using TensorDesc = Owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;

// y = conv(x, w) without bias (cross-correlation, as the CPU Conv2d). x, w, y (and dx, dw) are
// all of `dtype` (f32, bf16 or f16) with f32 compute. Tensor cores are allowed for bf16/f16,
// and for f32 only when math == tf32 (strict f32 runs FMA kernels only). Each direction takes
// the first algorithm of cuDNN's heuristic (cudnnGet*Algorithm_v7) whose workspace fits
// max_workspace_bytes; the Cudnn's shared workspace serves all three (and every other op), so
// calls on different streams must not overlap. Throws Error when no algorithm fits.
class ConvOp {
 public:
  ConvOp(Cudnn& dnn, const ConvGeometry& g, DType dtype, MathMode math,
         std::size_t max_workspace_bytes = std::size_t{256} << 20);
  std::int64_t out_h() const { return out_h_; }
  std::int64_t out_w() const { return out_w_; }
  std::size_t workspace_bytes() const { return workspace_bytes_; }  // what its algorithms need

  void forward(const void* x, const void* w, void* y, void* stream);            // overwrites y
  void backward_data(const void* w, const void* dy, void* dx, void* stream);    // overwrites dx
  void backward_filter(const void* x, const void* dy, void* dw, void* stream);  // overwrites dw

 private:
  using ConvDesc = Owned<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;

  Cudnn& dnn_;
  std::int64_t out_h_ = 0, out_w_ = 0;
  TensorDesc x_desc_, y_desc_;
  Owned<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor> w_desc_;
  // One descriptor per direction: each carries the math type of its chosen algorithm.
  ConvDesc fwd_desc_, bwd_data_desc_, bwd_filter_desc_;
  cudnnConvolutionFwdAlgo_t fwd_algo_{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo_{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo_{};
  std::size_t workspace_bytes_ = 0;
};

// Max pooling without padding (as the CPU MaxPool2d): out = (in - kernel) / stride + 1. NaN
// propagates. Backward routes each gradient to its window's maximum; where a window holds
// several exactly equal maxima, cuDNN may pick a different one than the CPU (its first).
class MaxPoolOp {
 public:
  MaxPoolOp(Cudnn& dnn, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t kernel,
            std::int64_t stride, DType dtype);
  std::int64_t out_h() const { return out_h_; }
  std::int64_t out_w() const { return out_w_; }

  void forward(const void* x, void* y, void* stream);                                   // overwrites y
  void backward(const void* x, const void* y, const void* dy, void* dx, void* stream);  // overwrites dx

 private:
  Cudnn& dnn_;
  std::int64_t out_h_ = 0, out_w_ = 0;
  Owned<cudnnPoolingDescriptor_t, cudnnDestroyPoolingDescriptor> pool_desc_;
  TensorDesc x_desc_, y_desc_;
};

// Spatial batch norm over [N, C, H, W] of dtype f32 or f16 (cuDNN's batch-norm API takes no
// bf16 activations: the constructor throws Error for it). gamma, beta, running and saved
// statistics are f32 [C]. As the CPU BatchNorm2d: running = (1 - momentum) * running +
// momentum * batch, with the unbiased batch variance for running_var; the batch is normalised
// with the biased variance; save_inv_std = 1 / sqrt(var + eps).
class BatchNormOp {
 public:
  BatchNormOp(Cudnn& dnn, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, DType dtype, double eps,
              double momentum);
  void forward_training(const void* x, void* y, const float* gamma, const float* beta, float* running_mean,
                        float* running_var, float* save_mean, float* save_inv_std, void* stream);
  void forward_inference(const void* x, void* y, const float* gamma, const float* beta, const float* running_mean,
                         const float* running_var, void* stream);
  // Overwrites dx, dgamma and dbeta; save_mean and save_inv_std from forward_training.
  void backward(const void* x, const void* dy, void* dx, const float* gamma, float* dgamma, float* dbeta,
                const float* save_mean, const float* save_inv_std, void* stream);

 private:
  Cudnn& dnn_;
  double eps_, momentum_;
  TensorDesc x_desc_, param_desc_;
};

}  // namespace ringtrain::cuda
