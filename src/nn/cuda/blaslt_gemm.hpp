// BlasLt: row-major GEMM on cuBLASLt with f32 accumulation, the CUDA counterpart of
// tensor/blas.hpp's sgemm, with an optional bias, ReLU, GELU or bias-gradient epilogue fused into it.
// Descriptors and the heuristic's algorithm are cached per shape, types and epilogue. A GEMM
// cuBLASLt has no algorithm for (leading dimensions it cannot take in bf16, say, as an LM head's
// odd vocabulary gives) runs on cuBLAS's cublasGemmEx instead, with a warning.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nn/cuda/device_buffer.hpp"
#include "nn/cuda/math_mode.hpp"
#include "nn/cuda/owned.hpp"
#include "ringtrain/tensor/dtype.hpp"
#include "tensor/gemm_shape.hpp"

namespace ringtrain::cuda {

// What the GEMM also does, with a device vector of C's dtype. bias: C[i][j] += vector[j] (length n),
// after alpha and beta (the bias is not scaled); C must be packed (ldc == n). relu: C[i][j] =
// max(C[i][j], 0) after everything else (no vector; a NaN passes, as the CPU ReLU), C packed;
// bias_relu: both, the bias first. bias_grad: vector[i] = sum over k of op(A)[i][k] (length m,
// overwritten): with op(A) = dy^T this is the bias gradient of the weight-gradient GEMM; needs
// alpha == 1, an f32 C and A packed (lda == its row). Fused by cuBLASLt where it has an
// algorithm and the vector is 16-byte aligned (a bf16 output adds a bf16 bias in the epilogue,
// as the model's compute copy holds it); otherwise one kernel runs after the plain GEMM (the
// same values in f32; a bf16/f16 C is then rounded twice; a missing algorithm is warned once
// per BlasLt).
// relu_mask, bias_relu_mask: relu, bias_relu that also write the ReLU's bit-mask (ReluMask) when
// cuBLASLt runs them (gemm() returns whether it did). relu_grad, for the gradient GEMM of the
// ReLU's input: C[i][j] = 0 where the ReLU gave 0 (from the bit-mask when there is one and
// cuBLASLt runs it, else from the ReLU's output by a kernel after the plain GEMM); C packed.
// gelu_aux, bias_gelu_aux: C = gelu(C) (the tanh form), after the bias for the latter, writing the
// GELU's input to GeluAux::pre; gelu_grad, for the gradient GEMM of the GELU's input: C[i][j] *=
// gelu'(pre[i][j]). C packed; cuBLASLt's epilogue where it has one, else the kernels of
// activation_kernels.hpp after the plain GEMM.
enum class Epilogue {
  none,
  bias,
  relu,
  bias_relu,
  bias_grad,
  relu_mask,
  bias_relu_mask,
  relu_grad,
  gelu_aux,
  bias_gelu_aux,
  gelu_grad
};

// The ReLU of a forward GEMM (C [m, n] row-major) seen by the gradient GEMM that later writes its
// input's gradient (the same shape): bit i * ld + j of `bits` is set where C[i][j] > 0 (cuBLASLt's
// bit-mask, its layout of C^T). ld is in bits: a multiple of 128, at least n (row_bits).
struct ReluMask {
  void* bits = nullptr;  // device, ld / 8 * m bytes; relu_grad: null when not written
  std::int64_t ld = 0;
  const void* output = nullptr;  // relu_grad: the ReLU's output (C's type and shape), its rule unfused
  static std::int64_t row_bits(std::int64_t n) { return (n + 127) / 128 * 128; }
};

// Whether a GEMM of at least a GFLOP has a row of A, B or C that is not a whole number of 16-byte
// vectors: cuBLASLt then has only its unaligned kernels (on an H200 a GPT-2 LM head of 50257
// columns ran Turing-era `align1` kernels, 15 ms of a 70 ms step). Smaller GEMMs (the 10-class
// heads of the image examples) lose too little to matter.
bool costly_unaligned_rows(const GemmShape& s, DType ab_type, DType c_type);

// The input of a GEMM's GELU epilogue (C's shape and type, packed: ld == n), written by the forward
// GEMM and read by the gradient GEMM of the GELU's input. cuBLASLt takes it when ld is a multiple
// of 8 and pre is 16-byte aligned; otherwise the kernels do the epilogue.
struct GeluAux {
  void* pre = nullptr;
  std::int64_t ld = 0;
};

// One per rank (or per stream that runs GEMMs concurrently with another: calls share one workspace).
class BlasLt {
 public:
  // Throws Error when cuBLASLt cannot start (no GPU or driver) and OutOfMemory when the
  // workspace does not fit. always_cublas (for tests): every GEMM on cuBLAS's fallback path.
  explicit BlasLt(std::size_t workspace_bytes = std::size_t{32} << 20, bool always_cublas = false);
  ~BlasLt();
  BlasLt(const BlasLt&) = delete;
  BlasLt& operator=(const BlasLt&) = delete;

  // A, B of ab_type (f32, bf16 or f16), C of c_type (f32, or equal to ab_type); f32
  // accumulation (TF32 tensor cores for f32 inputs when math == tf32). With beta == 0, C is
  // not read (it may hold NaN). `vector`, `mask` and `gelu` are the epilogue's (see Epilogue),
  // null when it reads none. Returns whether cuBLASLt ran the epilogue (false: a kernel did, or
  // there is none). Throws Error when neither cuBLASLt nor cuBLAS can run the plain GEMM.
  bool gemm(const GemmShape& s, float alpha, const void* a, const void* b, float beta, void* c, DType ab_type,
            DType c_type, MathMode math, void* stream, Epilogue epilogue = Epilogue::none, void* vector = nullptr,
            const ReluMask* mask = nullptr, const GeluAux* gelu = nullptr);

  // For benchmarks: runs every algorithm the heuristic offers for this problem (up to
  // max_candidates) `repeats` times on `stream` with alpha = 1, beta = 0 (C is overwritten)
  // and returns the mean milliseconds per call, timed with CUDA events. Element 0 is the
  // algorithm gemm() uses. Synchronises the stream.
  std::vector<double> time_candidates(const GemmShape& s, const void* a, const void* b, void* c, DType ab_type,
                                      DType c_type, MathMode math, void* stream, int repeats = 20,
                                      int max_candidates = 16);

 private:
  // Everything that selects descriptors and algorithm: cuBLASLt's heuristic also depends on
  // the pointers' alignment (the epilogue vector's too), so that is part of the key.
  struct Key {
    GemmShape shape;
    DType ab_type, c_type;
    MathMode math;
    Epilogue epilogue;
    std::uint32_t align_a, align_b, align_c, align_vector;  // align_vector: 0 without epilogue
    std::uint32_t align_mask;                               // 0 without a mask's bits
    std::int64_t mask_ld;                                   // 0 without a mask
    std::uint32_t align_gelu;                               // 0 without a GeluAux
    std::int64_t gelu_ld;                                   // 0 without a GeluAux
    auto operator<=>(const Key&) const = default;
  };
  struct Plan;

  static std::string describe(const Key& key);  // for messages
  Key make_key(const GemmShape& s, const void* a, const void* b, const void* c, DType ab_type, DType c_type,
               MathMode math, Epilogue epilogue, const void* vector, const ReluMask* mask, const GeluAux* gelu) const;
  std::unique_ptr<Plan> make_plan(const Key& key) const;
  // The plan for key, made (and its algorithm chosen) on first use; without a fused algorithm
  // for key's epilogue, a plain GEMM's plan marked unfused.
  Plan& plan_for(const Key& key, void* vector, void* aux);
  // What the heuristic offers, best first; empty when nothing fits.
  std::vector<cublasLtMatmulHeuristicResult_t> candidates(const Key& key, const Plan& plan, int count) const;
  void run(const Plan& plan, const cublasLtMatmulAlgo_t& algo, float alpha, const void* a, const void* b, float beta,
           void* c, void* vector, void* aux, void* stream) const;
  // The plain GEMM of key on cuBLAS (cublasGemmEx, or its strided-batched form).
  void run_cublas(const Key& key, float alpha, const void* a, const void* b, float beta, void* c, void* stream);

  Owned<cublasLtHandle_t, cublasLtDestroy> handle_;  // before workspace_: created first
  DeviceBuffer workspace_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  bool always_cublas_;
  Owned<cublasHandle_t, cublasDestroy> cublas_;  // made at the first GEMM that needs it
  bool warned_unfused_ = false, warned_cublas_ = false, warned_unaligned_ = false;
};

}  // namespace ringtrain::cuda
