// Private: the CUDA layers. Each derives from its CPU layer (shapes, parameter specs and
// initialisation are shared) and replaces forward/backward with device work queued on the
// model's stream: GEMMs through cuBLASLt, convolution, pooling and batch norm through cuDNN,
// the rest through kernels/. Activations are in the compute dtype; parameters, their
// gradients and batch-norm statistics stay f32.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>

#include "nn/attention_gemms.hpp"
#include "nn/cuda/cuda_compute.hpp"
#include "nn/cuda/cudnn_attention.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain::cuda {

using ComputePtr = std::shared_ptr<CudaCompute>;

// A layer's cuDNN ops (descriptors, chosen algorithms, workspace), one per batch size seen
// (the training batch, the last batch of an epoch, evaluation's). Kept for the model's life:
// algorithms are chosen once, and a CUDA graph of the step never sees its workspace freed.
template <typename Op>
class PerBatchOp {
 public:
  template <typename Make>
  Op& get(std::int64_t batch, Make&& make) {
    auto it = ops_.find(batch);
    if (it == ops_.end()) it = ops_.emplace(batch, make(batch)).first;
    return *it->second;
  }

 private:
  std::map<std::int64_t, std::unique_ptr<Op>> ops_;
};

class CudaLinear final : public Linear {
 public:
  CudaLinear(ComputePtr compute, std::int64_t out_features, bool bias, double init_std);
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void bind_compute(const std::vector<Tensor>& compute) override;
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;
  // Not on the GPU yet: a tied weight then goes through the model's scratch.
  bool param_grad_rows_supported(std::size_t /*param*/) const override { return false; }
  // A CudaReLU, or a CudaGelu in bf16/f16: in the GEMM's epilogue.
  bool absorb_consumer(const Layer& consumer) override;
  // A CudaLinear with an absorbed ReLU or GELU: that activation's gradient in this layer's dx
  // GEMM's epilogue, from the bit-mask or GELU input that layer's forward GEMM writes.
  bool fuse_producer_gradient(Layer& producer) override;

 private:
  // The outputs its GEMMs compute for n rows: out_, or out_ padded to whole 16-byte vectors where
  // costly_unaligned_rows says so and no ReLU follows (the rows then go through the workspace).
  std::int64_t padded_out(std::int64_t n) const;
  // Copies the compute weight w and bias b into padded_weight_ / padded_bias_ of `cols` outputs.
  void refresh_padded(std::int64_t cols, const void* w, const void* b);
  ComputePtr compute_;
  ComputeCopy weight_;
  ComputeCopy bias_;  // in the activation dtype: the epilogue adds it to C of that dtype
  // With the absorbed ReLU's gradient done by the next Linear: the ReLU's bit-mask of the last
  // training forward ([batch][ReluMask::row_bits(out)] bits) and whether cuBLASLt wrote it.
  bool relu_gradient_by_consumer_ = false;
  Tensor relu_mask_;
  bool relu_mask_written_ = false;
  const CudaLinear* relu_producer_ = nullptr;  // whose ReLU's gradient this layer's dx GEMM applies
  // With an absorbed GELU: its input of the last forward ([batch, out], the activation dtype),
  // which its gradient needs (applied here, or in the next Linear's dx GEMM).
  bool gelu_after_ = false, gelu_gradient_by_consumer_ = false;
  Tensor gelu_input_;
  const CudaLinear* gelu_producer_ = nullptr;  // whose GELU's gradient this layer's dx GEMM applies
  Tensor padded_weight_, padded_bias_;         // padded_out(): [cols, in] and [cols], zero past out_
};

class CudaConv2d final : public Conv2d {
 public:
  CudaConv2d(ComputePtr compute, const Conv2dOptions& options);
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void bind_compute(const std::vector<Tensor>& compute) override { weight_.use(compute[0]); }
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;

 private:
  ConvOp& op_for(std::int64_t batch);
  ComputePtr compute_;
  ComputeCopy weight_;
  Tensor dw_low_;  // the filter gradient in the compute dtype, before its cast to f32
  PerBatchOp<ConvOp> op_;
};

// A parameter-free CPU layer whose forward and backward run as kernels on the compute stream
// (one specialisation of each per layer in cuda_elementwise.cpp).
template <typename CpuLayer>
class CudaElementwise final : public CpuLayer {
 public:
  explicit CudaElementwise(ComputePtr compute) : compute_(std::move(compute)) {}
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;

 private:
  ComputePtr compute_;
};
using CudaReLU = CudaElementwise<ReLU>;
using CudaGelu = CudaElementwise<Gelu>;
using CudaFlatten = CudaElementwise<Flatten>;  // a device copy run on its own; a Model passes it through
// The specialisations cuda_elementwise.cpp defines (declared, so no other file instantiates the
// undefined primary members).
template <>
void CudaReLU::forward(const Tensor& x, Tensor& y, const StepInfo& info);
template <>
void CudaReLU::backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx);
template <>
void CudaGelu::forward(const Tensor& x, Tensor& y, const StepInfo& info);
template <>
void CudaGelu::backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx);
template <>
void CudaFlatten::forward(const Tensor& x, Tensor& y, const StepInfo& info);
template <>
void CudaFlatten::backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx);

class CudaMaxPool2d final : public MaxPool2d {
 public:
  CudaMaxPool2d(ComputePtr compute, std::int64_t kernel, std::int64_t stride);
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;
  bool absorb_producer(const Layer&) override { return false; }  // cuDNN pools; the ReLU runs itself

 private:
  MaxPoolOp& op_for(std::int64_t batch);
  ComputePtr compute_;
  bool staged_;  // bf16: the op runs in f32 on cast copies (max pooling is exact either way)
  Tensor x_f32_, y_f32_, dy_f32_, dx_f32_;
  PerBatchOp<MaxPoolOp> op_;
};

class CudaDropout final : public Dropout {
 public:
  CudaDropout(ComputePtr compute, double p, int layer_index);
  void begin_step(const StepInfo& info) override;  // stores the step's mask key on the device
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;

 private:
  // Queues the store of info's mask key into key_ unless it is there already (begin_step did it).
  void store_key(const StepInfo& info);
  ComputePtr compute_;
  Tensor key_;  // device u64: the mask key the forward kernel reads
  std::uint64_t stored_key_ = 0;
  bool key_stored_ = false;
  Tensor mask_;          // u8 keep flags of the last training forward, at the largest batch seen
  bool masked_ = false;  // false after an evaluation forward or with p = 0: backward copies
};

class CudaBatchNorm2d final : public BatchNorm2d {
 public:
  CudaBatchNorm2d(ComputePtr compute, double momentum, double eps);
  Shape configure(const Shape& input) override;
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;

 private:
  BatchNormOp& op_for(std::int64_t batch);
  ComputePtr compute_;
  bool staged_;                      // bf16: the op runs in f32 on cast copies
  Tensor save_mean_, save_inv_std_;  // batch statistics of the last training forward (f32 [C])
  Tensor x_f32_, y_f32_;             // bf16 only: f32 copies of x, and of y (forward) or dy (backward)
  Tensor dx_scratch_;                // dx when the caller needs none or it is cast back
  PerBatchOp<BatchNormOp> op_;
};

// The residual addition: y = a + b in the activation dtype; backward copies dy to both inputs.
class CudaAdd final : public Add {
 public:
  explicit CudaAdd(ComputePtr compute) : compute_(std::move(compute)) {}
  void forward_many(const std::vector<const Tensor*>& x, Tensor& y, const StepInfo& info) override;
  void backward_many(const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                     const std::vector<Tensor*>& dx) override;

 private:
  ComputePtr compute_;
};

class CudaLayerNorm final : public LayerNorm {
 public:
  CudaLayerNorm(ComputePtr compute, double eps) : LayerNorm(eps), compute_(std::move(compute)) {}
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;

 private:
  ComputePtr compute_;
  Tensor mean_dev_, rstd_dev_;  // f32 [rows] of the last forward
  Tensor scratch_;              // the parameter gradients' partial sums
};

// Training only: decoding (generation) runs on the CPU. The token table's gradient is written
// whole (a tied table goes through the model's scratch).
class CudaEmbedding final : public Embedding {
 public:
  CudaEmbedding(ComputePtr compute, std::int64_t vocab_size, std::int64_t block_size, std::int64_t n_embd)
      : Embedding(vocab_size, block_size, n_embd), compute_(std::move(compute)) {}
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;
  void start_decoding(std::int64_t max_positions) override;
  bool param_grad_rows_supported(std::size_t /*param*/) const override { return false; }

 private:
  ComputePtr compute_;
  Tensor scratch_;  // u8: the sort of positions by token
};

// Which attention a CudaCausalSelfAttention runs: cuDNN's fused one (cudnn_attention.hpp) or the
// unfused one (per-head GEMMs on cuBLASLt and the causal softmax kernels).
enum class AttentionKernel {
  automatic,  // fused where cuDNN builds it (bf16/f16), else unfused (warned once for bf16/f16)
  fused,      // fused or an Error saying why not
  unfused,
};

// Causal self-attention over the fused projection [N, T, 3C] (q | k | v, heads side by side).
// Fused: cuDNN's flash attention reads q, k, v in place and keeps each row's log-sum-exp; one
// pair of graphs per batch size. Unfused: the scores of all heads by cuBLASLt GEMMs in place in
// the heads' columns (as nn/attention_gemms.hpp plans them), the causal softmax kernel, the
// output GEMM; like the CPU layer it keeps only each row's log-sum-exp, and backward recomputes
// the probabilities; its [N*heads, T, T] matrices live in the model's shared workspace
// (CudaCompute::workspace). Training only.
class CudaCausalSelfAttention final : public CausalSelfAttention {
 public:
  CudaCausalSelfAttention(ComputePtr compute, std::int64_t n_head, AttentionKernel kernel = AttentionKernel::automatic)
      : CausalSelfAttention(n_head), compute_(std::move(compute)), kernel_(kernel) {}
  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;
  void start_decoding(std::int64_t max_positions) override;

 private:
  // The scratch for n samples, carved: the f32 scores [n * heads, T, T] (later dP) and the
  // probabilities (later dS) of the activation dtype.
  struct Carved {
    float* scores;
    void* probs;
  };
  // A pass's buffers by AttentionGemms::Buffer (x, y, dy, dx, scores, probs; null where the pass
  // has none).
  using Buffers = std::array<void*, 6>;
  // The fused attention for n samples, built on first use; nullptr: run unfused.
  CudnnAttention* fused_for(std::int64_t n);
  void forward_unfused(const Tensor& x, Tensor& y);
  void backward_unfused(const Tensor& x, const Tensor& dy, Tensor& dx);
  Carved carve(std::int64_t n);
  // Runs one of AttentionGemms' products over the buffers on cuBLASLt.
  void run(const AttentionGemms::Product& product, const Buffers& buffers);
  ComputePtr compute_;
  AttentionKernel kernel_;
  std::map<std::int64_t, std::unique_ptr<CudnnAttention>> fused_;  // by batch size; nullptr: not possible
  Tensor lse_dev_;                                                 // f32 [N*heads, T] of the last forward
};

// Copies `bytes` between device buffers on the stream.
void copy_on_device(void* dst, const void* src, std::size_t bytes, void* stream);
// Copies `rows` rows of `row_bytes` between device buffers whose rows start every dst_pitch and
// src_pitch bytes, on the stream.
void copy_rows_on_device(void* dst, std::int64_t dst_pitch, const void* src, std::int64_t src_pitch,
                         std::int64_t row_bytes, std::int64_t rows, void* stream);
// Copies `rows` rows of src_pitch bytes (packed) into rows of dst_pitch >= src_pitch bytes and
// zeroes each row's remaining bytes, on the stream.
void pad_rows_on_device(void* dst, std::int64_t dst_pitch, const void* src, std::int64_t src_pitch, std::int64_t rows,
                        void* stream);

}  // namespace ringtrain::cuda
