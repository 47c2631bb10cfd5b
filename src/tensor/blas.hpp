// Private: the few BLAS entry points the CPU backend uses, row-major, single precision.
// Keeping cblas.h out of every other file makes swapping the BLAS a one-file change.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ringtrain::blas {

void set_threads(int threads);
int threads();
// OpenBLAS's build and its threads, for doctor: "OpenBLAS 0.3.21 ... Haswell MAX_THREADS=64, 1 thread".
std::string openblas_description();

// The library that computes sgemm. Chosen once per process from the environment variable
// RINGTRAIN_SGEMM (see sgemm_library_for); OpenBLAS serves everything else.
enum class SgemmLibrary { openblas, onednn };
// The choice a RINGTRAIN_SGEMM value makes: "openblas"; "onednn" (ConfigError in a build without
// oneDNN); "auto" or empty: oneDNN where the build has it and its kernels here are AVX-512 ones
// (on the AVX-512 EPYC of docs/BENCHMARKS.md twice OpenBLAS 0.3.21's, which run AVX2 code
// there), else OpenBLAS. Anything else is a ConfigError naming the variable and value.
SgemmLibrary sgemm_library_for(std::string_view setting);
// The process's choice, made at the first call (Context::bind's, at set-up), which also has the
// library prepare its kernels; ConfigError for a bad RINGTRAIN_SGEMM.
SgemmLibrary sgemm_library();
// Whether sgemm may run in host_parallel's loops, on several of its workers at once: oneDNN's,
// which inside a parallel region computes on the calling thread alone; not OpenBLAS's threaded
// build, whose calls share one thread pool.
bool sgemm_in_parallel_loops();
// What computes sgemm here, for doctor and bench gemm: "oneDNN 2.6.3 (avx512_core_bf16), 1 thread".
std::string describe();

// C[m,n] = alpha * op(A) * op(B) + beta * C, all row-major; op(X) = X^T when trans_X; through
// sgemm_library().
void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);
// The same through `library`, whatever the process chose (tests hold both to the same standard).
void sgemm_with(SgemmLibrary library, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                std::int64_t ldc);

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
