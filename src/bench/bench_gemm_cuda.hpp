// Private to `ringtrain bench gemm --backend cuda`: what GpuBackend::current_gpu and
// time_gemm_candidates (src/cuda/gemm_timing.cpp) take and give: one GEMM timed on the current
// GPU through ringtrain's cuBLASLt wrapper, every algorithm cuBLASLt offers for it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain {

// Row-major C[m,n] = op(A) op(B), op(X) = X^T when trans_X, with tight leading dimensions,
// as GemmShape takes it. A and B of ab_type, C of c_type, f32 accumulation.
struct GemmProblem {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  DType ab_type = DType::f32, c_type = DType::f32;
  bool tf32 = false;  // f32 inputs on TF32 tensor cores (MathMode::tf32)
};

// The GPU this process is bound to (Context::bind chose it).
struct CudaGpu {
  int ordinal = 0;
  std::string name;
};

// time_gemm_candidates gives milliseconds per call, ms[r][i]: measurement r (of `repeats`, each
// `calls` calls timed with CUDA events) of the i-th algorithm cuBLASLt's heuristic offers (up to
// 16); i = 0 is the one BlasLt::gemm uses. Operands hold random values in [-1, 1). Throws Error
// on any CUDA failure.

}  // namespace ringtrain
