// Private to `ringtrain bench gemm --backend cuda`: one GEMM timed on the current GPU through
// ringtrain's cuBLASLt wrapper, every algorithm cuBLASLt offers for it (bench_gemm_cuda.cpp);
// a build without CUDA has bench_gemm_stub.cpp, which throws NotCompiled.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain {

// Row-major C[m,n] = op(A) op(B), op(X) = X^T when trans_X, with tight leading dimensions,
// as cuda::GemmShape takes it. A and B of ab_type, C of c_type, f32 accumulation.
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
CudaGpu current_gpu_cuda();

// Milliseconds per call, ms[r][i]: measurement r (of `repeats`, each `calls` calls timed with
// CUDA events) of the i-th algorithm cuBLASLt's heuristic offers (up to 16); i = 0 is the one
// BlasLt::gemm uses. Operands hold random values in [-1, 1). Throws Error on any CUDA failure.
std::vector<std::vector<double>> time_gemm_candidates_cuda(const GemmProblem& p, int repeats, int calls);

}  // namespace ringtrain
