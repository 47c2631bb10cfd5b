// The BLAS wrapper (see blas.hpp): OpenBLAS, and oneDNN's sgemm where it is the faster.
#include "tensor/blas.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include <cblas.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/name_table.hpp"
#include "tensor/onednn_sgemm.hpp"

namespace ringtrain::blas {
namespace {

constexpr NameTable<SgemmLibrary> kLibraryNames[] = {{"openblas", SgemmLibrary::openblas},
                                                     {"onednn", SgemmLibrary::onednn}};

void openblas_sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                    const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                    std::int64_t ldc) {
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

// "<library>, N thread(s)" with this process's BLAS thread count.
std::string with_threads(const std::string& library) {
  const int n = openblas_get_num_threads();
  return fmt::format("{}, {} thread{}", library, n, n == 1 ? "" : "s");
}

}  // namespace

std::string openblas_description() {
  std::string config = openblas_get_config();
  while (!config.empty() && config.back() == ' ') config.pop_back();
  return with_threads(config);
}

void set_threads(int t) { openblas_set_num_threads(t); }
int threads() { return openblas_get_num_threads(); }

SgemmLibrary sgemm_library_for(std::string_view setting) {
  if (setting.empty() || setting == "auto")
    return onednn::compiled() && onednn::avx512_here() ? SgemmLibrary::onednn : SgemmLibrary::openblas;
  const auto library = value_of_name(kLibraryNames, setting);
  RT_REQUIRE(library.has_value(), ConfigError, "RINGTRAIN_SGEMM: unknown library '{}' (auto, {})", setting,
             fmt::join(names_of(kLibraryNames), ", "));
  RT_REQUIRE(*library != SgemmLibrary::onednn || onednn::compiled(), ConfigError,
             "RINGTRAIN_SGEMM=onednn: this ringtrain was built without oneDNN (RINGTRAIN_WITH_ONEDNN=OFF)");
  return *library;
}

SgemmLibrary sgemm_library() {
  static const SgemmLibrary library = [] {
    const char* setting = std::getenv("RINGTRAIN_SGEMM");  // NOLINT(concurrency-mt-unsafe): read once, never set
    const SgemmLibrary chosen = sgemm_library_for(setting == nullptr ? "" : setting);
    if (chosen == SgemmLibrary::onednn) onednn::generate_kernels(threads());
    return chosen;
  }();
  return library;
}

bool sgemm_in_parallel_loops() { return sgemm_library() == SgemmLibrary::onednn; }

std::string describe() {
  return sgemm_library() == SgemmLibrary::onednn ? with_threads(onednn::description()) : openblas_description();
}

void sgemm_with(SgemmLibrary library, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // C = beta C, which oneDNN 2.6.3 leaves undone (and NaN stays NaN) for k = 0
    for (std::int64_t i = 0; i < m; ++i)
      for (float* x = c + i * ldc; x != c + i * ldc + n; ++x) *x = beta == 0.0f ? 0.0f : beta * *x;
    return;
  }
  if (library == SgemmLibrary::onednn)
    onednn::sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads());
  else
    openblas_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  sgemm_with(sgemm_library(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
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
