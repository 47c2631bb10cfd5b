// Causal self-attention fused by cuDNN (its scaled-dot-product "flash" attention, built through
// the cudnn-frontend graph API): q, k and v are read in place from the fused projection
// [N, T, 3C] (q | k | v, heads side by side in each third, as the CPU layer), the output is
// written to [N, T, C] and each row's softmax log-sum-exp is kept for backward, which writes
// dq | dk | dv into [N, T, 3C]. No [T, T] matrix is stored: the probabilities live in on-chip
// tiles. bf16 and f16 only (cuDNN's SDPA); the backward is cuDNN's deterministic one, so a step
// gives the same bits every time (resume, CUDA graph replay). Built when CMake found the
// cudnn-frontend headers (RINGTRAIN_HAVE_CUDNN_FRONTEND); otherwise, and wherever cuDNN refuses
// the graphs, create() says why and the layer runs its unfused path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "nn/cuda/cudnn_ops.hpp"
#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain::cuda {

struct AttentionShape {
  std::int64_t n, t, heads, head_size;  // samples, positions, heads, channels per head
  std::int64_t n_embd() const { return heads * head_size; }
};

class CudnnAttention {
 public:
  // The forward and backward graphs for `shape` in `dtype`, built and checked by cuDNN; nullptr
  // with `why_not` set when that is not possible (dtype, cuDNN version or GPU, built without the
  // frontend). Building takes up to a second; the layer keeps one per batch size.
  static std::unique_ptr<CudnnAttention> create(Cudnn& dnn, const AttentionShape& shape, DType dtype,
                                                std::string& why_not);
  // The cudnn-frontend version this build's fused attention was compiled with ("1.23.0"), or
  // empty: built without it (CMake did not find it), so there is no fused attention.
  static std::string frontend_version();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Device scratch forward and backward need (the model's shared workspace).
  std::size_t workspace_bytes() const { return workspace_bytes_; }
  // y [N, T, C] = softmax(q k^T / sqrt(hs), causal) v; lse [N, heads, T] (f32) for backward.
  void forward(const void* qkv, void* y, float* lse, void* workspace, void* stream);
  // dqkv [N, T, 3C] (overwritten) from the forward's qkv, y and lse and the output gradient dy.
  void backward(const void* qkv, const void* y, const void* dy, const float* lse, void* dqkv, void* workspace,
                void* stream);

 private:
  struct Graphs;  // cudnn-frontend's, kept out of this header
  CudnnAttention(Cudnn& dnn, const AttentionShape& shape, std::unique_ptr<Graphs> graphs);
  Cudnn& dnn_;
  AttentionShape shape_;
  std::unique_ptr<Graphs> graphs_;
  std::size_t workspace_bytes_ = 0;
};

}  // namespace ringtrain::cuda
