// oneDNN's sgemm (see onednn_sgemm.hpp). Its JIT kernels are picked at run time for the widest
// instruction set the CPU has (or ONEDNN_MAX_CPU_ISA allows); it threads with GCC's OpenMP
// runtime, whose thread count is per calling thread, so each thread that calls sets it (use_threads).
//
// No signal may be handled on a thread that runs its kernels: oneDNN's generated f32 GEMM
// kernels (before 3.11, fixed by uxlfoundation/oneDNN#4855) point the stack pointer into a heap
// workspace, so a handler (Slurm's SIGTERM before preemption, a profiler's SIGPROF) would write
// its frame into the heap: wrong results and a corrupted heap (test_blas's signal storms catch
// it). So the calling thread's signals are blocked for each call (one that arrives meanwhile is
// delivered when the call returns), and the OpenMP workers that compute with it block every
// signal for good: use_threads, at the first call of each thread and at each change of its
// thread count (and at oneDNN's convolutions' set-up), runs a parallel region that does that on
// every worker of its team. The workers of one thread are
// the same for all its parallel regions, oneDNN's convolutions' too, whichever made them.
#include "tensor/onednn_sgemm.hpp"

#include <fmt/format.h>
#include <pthread.h>

#include <csignal>
#include <vector>
#include <oneapi/dnnl/dnnl.h>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/name_table.hpp"
#include "tensor/gomp.hpp"

namespace ringtrain::blas::onednn {
namespace {

constexpr NameTable<dnnl_cpu_isa_t> kIsaNames[] = {
    {"sse41", dnnl_cpu_isa_sse41},
    {"avx", dnnl_cpu_isa_avx},
    {"avx2", dnnl_cpu_isa_avx2},
    {"avx2_vnni", dnnl_cpu_isa_avx2_vnni},
    {"avx512_core", dnnl_cpu_isa_avx512_core},
    {"avx512_core_vnni", dnnl_cpu_isa_avx512_core_vnni},
    {"avx512_core_bf16", dnnl_cpu_isa_avx512_core_bf16},
    {"avx512_core_amx", dnnl_cpu_isa_avx512_core_amx},
};

dnnl_cpu_isa_t isa_here() { return dnnl_get_effective_cpu_isa(); }

// Blocks every signal on the thread that makes it while it lives, then restores that thread's mask.
class SignalsBlocked {
 public:
  SignalsBlocked() {
    sigset_t all;
    sigfillset(&all);
    RT_REQUIRE(pthread_sigmask(SIG_SETMASK, &all, &previous_) == 0, Error, "pthread_sigmask: cannot block signals");
  }
  ~SignalsBlocked() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t previous_{};
};

// Run by every thread of a parallel region: each but `caller` (a pthread_t) blocks every signal for good.
void block_signals_unless_caller(void* caller) {
  if (pthread_equal(pthread_self(), *static_cast<const pthread_t*>(caller)) != 0) return;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

}  // namespace

bool compiled() { return true; }

bool avx512_here() { return (isa_here() & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core; }

std::string description() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("oneDNN {}.{}.{} ({})", v->major, v->minor, v->patch, name_of_value(kIsaNames, isa_here()));
}

void use_threads(int threads) {
  thread_local int team_prepared_for = 0;
  if (team_prepared_for == threads) return;
  omp_set_num_threads(threads);
  pthread_t self = pthread_self();
  GOMP_parallel(block_signals_unless_caller, &self, static_cast<unsigned>(threads), 0);
  team_prepared_for = threads;
}

void generate_kernels(int threads) {
  // A 16 x 16 x 16 product makes the GEMM kernels (a 1 x 1 x 1 one does not), a one-row product
  // the matrix-vector ones.
  constexpr std::int64_t n = 16;
  const std::vector<float> a(n * n, 1.0f), b(n * n, 1.0f);
  std::vector<float> c(n * n);
  sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n, threads);
  sgemm(false, true, 1, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n, threads);
}

void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc, int threads) {
  const SignalsBlocked blocked;
  use_threads(threads);
  const dnnl_status_t status =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  RT_REQUIRE(status == dnnl_success, Error, "oneDNN sgemm (m={}, n={}, k={}, lda={}, ldb={}, ldc={}) failed: status {}",
             m, n, k, lda, ldb, ldc, static_cast<int>(status));
}

}  // namespace ringtrain::blas::onednn
