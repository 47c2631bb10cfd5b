// GemmShape: one GEMM's (or a strided batch of GEMMs') shape and layout, row-major as
// blas::sgemm takes it; cuda::BlasLt runs it on the GPU, and plans such as attention_gemms.hpp
// describe their products with it on any backend.
#pragma once
#include <compare>
#include <cstdint>

namespace ringtrain {

// C[m,n] = alpha * op(A) * op(B) + beta * C, op(X) = X^T when trans_X, each matrix row-major
// with its leading dimension. With batch > 1: `batch` such products, matrix i of A, B and C
// starting stride_a, stride_b and stride_c elements after matrix i - 1 (attention's per-head
// GEMMs; no epilogue).
struct GemmShape {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  std::int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  auto operator<=>(const GemmShape&) const = default;
};

}  // namespace ringtrain
