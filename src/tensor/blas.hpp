// Private: the few BLAS entry points the CPU backend uses, row-major, single precision.
// Keeping cblas.h out of every other file makes swapping the BLAS a one-file change.
#pragma once
#include <cstdint>

namespace ringtrain::blas {

void set_threads(int threads);
int threads();

// C[m,n] = alpha * op(A) * op(B) + beta * C, all row-major; op(X) = X^T when trans_X.
void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

}  // namespace ringtrain::blas
