// Private: the few BLAS entry points the CPU backend uses, row-major, single precision.
// Keeping cblas.h out of every other file makes swapping the BLAS a one-file change.
#pragma once
#include <cstdint>
#include <vector>

namespace ringtrain::blas {

void set_threads(int threads);
int threads();

// C[m,n] = alpha * op(A) * op(B) + beta * C, all row-major; op(X) = X^T when trans_X.
void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

// Square n x n sgemms on buffers of its own: the machine's compute peak as bench gemm and the
// trainer's MFU measure it.
class SgemmTimer {
 public:
  explicit SgemmTimer(std::int64_t n);
  // Seconds for `iterations` back-to-back sgemms.
  double seconds(std::int64_t iterations);
  // GFLOP/s of `iterations` sgemms that took `seconds`.
  double gflops(std::int64_t iterations, double seconds) const;

 private:
  std::int64_t n_;
  std::vector<float> a_, b_, c_;
};

}  // namespace ringtrain::blas
