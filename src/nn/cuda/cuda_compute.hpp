// Private: CudaCompute, what every CUDA layer of one model shares: the cuBLASLt and cuDNN
// handles, the stream the layers run on, the activation dtype and the math mode.
#pragma once
#include <memory>

#include "cuda/compute_stream.hpp"
#include "nn/cuda/blaslt_gemm.hpp"
#include "nn/cuda/cudnn_ops.hpp"
#include "ringtrain/tensor/dtype.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain::cuda {

struct CudaCompute {
  CudaCompute(DType activation_dtype, bool tf32)
      : act(activation_dtype), math(tf32 ? MathMode::tf32 : MathMode::strict_f32) {}
  DType act;
  MathMode math;
  BlasLt blas;
  Cudnn dnn;
  // The rank's compute stream (cuda/compute_stream.hpp): capturable into a CUDA graph, and
  // blocking, so host copies and the NCCL communicator's input event still order after it.
  void* stream = compute_stream();
  // Scratch that one layer's forward or backward uses and leaves (cuDNN's workspaces, the
  // attention layers' per-head matrices and scores): one buffer for all the model's layers.
  void* workspace(std::size_t bytes) { return dnn.workspace().get(bytes); }
};

// A compute-dtype copy of an f32 master parameter (weights feed GEMMs and convolutions in the
// activation dtype). refresh() casts the master into it; with f32 activations it is the master.
// A copy in the model's compute arena (use()) is kept current by the model (the fused
// optimizer writes it), so refresh() leaves it as it is.
class ComputeCopy {
 public:
  void bind(const Tensor& master, DType act);
  void use(const Tensor& copy);
  void* refresh(void* stream);  // before a forward: the master may have changed
  void* get() const { return copy_.raw() != nullptr ? copy_.raw() : master_.raw(); }

 private:
  Tensor master_, copy_;
  bool external_ = false;  // copy_ is the model's (use())
};

// A device scratch buffer of at least `n` elements of `dtype` (grown, never shrunk).
const Tensor& scratch(Tensor& buffer, std::int64_t n, DType dtype);

// cuDNN takes no bf16 for pooling and batch norm here, so those layers run in f32 on cast
// copies: t itself when it is f32, else t cast to f32 in `buffer` (on the stream).
const void* as_f32(const Tensor& t, Tensor& buffer, void* stream);

}  // namespace ringtrain::cuda
