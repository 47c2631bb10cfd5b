// Private: oneDNN's sgemm, the faster of the two sgemm libraries where its kernels are AVX-512
// ones (blas.cpp chooses). A build with oneDNN (RINGTRAIN_WITH_ONEDNN) compiles onednn_sgemm.cpp;
// one without it onednn_sgemm_absent.cpp, which says there is none.
#pragma once
#include <cstdint>
#include <string>

namespace ringtrain::blas::onednn {

// Whether this build has oneDNN.
bool compiled();
// Whether oneDNN runs AVX-512 (or wider) kernels on this CPU, after ONEDNN_MAX_CPU_ISA.
bool avx512_here();
// "oneDNN 2.6.3 (avx512_core_bf16)": the version and the instruction set its kernels use here.
std::string description();
// Has this thread's oneDNN calls (sgemm here, the convolutions' primitives) run on `threads`
// OpenMP threads, whose workers block every signal for good (onednn_sgemm.cpp says why); only
// the first call of a thread, and one with another count, does anything.
void use_threads(int threads);
// Makes oneDNN generate its f32 GEMM kernels, which it does all at once at the first call
// (~450 KiB of heap on the AVX-512 EPYC of docs/BENCHMARKS.md, held until exit): done at set-up,
// no training step pays for it and no memory measurement (tune batch's) counts it as the model's.
void generate_kernels(int threads);
// As blas::sgemm, on `threads` OpenMP threads; throws NotCompiled in a build without oneDNN.
void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc, int threads);

}  // namespace ringtrain::blas::onednn
