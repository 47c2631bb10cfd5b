// OpenBLAS-backed BLAS wrapper (see blas.hpp).
#include "tensor/blas.hpp"

#include <algorithm>
#include <chrono>

#include <cblas.h>

namespace ringtrain::blas {

void set_threads(int t) { openblas_set_num_threads(t); }
int threads() { return openblas_get_num_threads(); }

void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  // OpenBLAS applies a beta other than 1 in a pass over C of its own before the product
  // (sgemm_beta), slower for beta = 0 than zeroing C here: in a perf profile of the Shakespeare
  // GPT's step (2 ranks, AVX2 EPYC, OpenBLAS 0.3.21's Zen kernels) sgemm_beta took 2.5% of the
  // time, the memset that replaced it 1.3%. Either way C is 0 + alpha op(A) op(B): the same
  // values, and C is not read before it is zeroed.
  if (beta == 0.0f) {
    for (std::int64_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.0f);
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

SgemmTimer::SgemmTimer(std::int64_t n)
    : n_(n), a_(static_cast<std::size_t>(n * n), 0.5f), b_(a_.size(), 0.25f), c_(a_.size(), 0.0f) {}

double SgemmTimer::seconds(std::int64_t iterations) {
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < iterations; ++i)
    sgemm(false, false, n_, n_, n_, 1.0f, a_.data(), n_, b_.data(), n_, 0.0f, c_.data(), n_);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double SgemmTimer::gflops(std::int64_t iterations, double seconds) const {
  return 2.0 * static_cast<double>(n_ * n_ * n_) * static_cast<double>(iterations) / seconds / 1e9;
}

}  // namespace ringtrain::blas
