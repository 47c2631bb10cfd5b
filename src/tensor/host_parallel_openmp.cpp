// host_parallel on GCC's OpenMP runtime, which a build with oneDNN links (host_parallel.hpp).
// The team is the one oneDNN's sgemm computes with, prepared by onednn::use_threads so that its
// workers block every signal before they run anything.
#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>

#include "tensor/blas.hpp"
#include "tensor/gomp.hpp"
#include "tensor/host_parallel.hpp"
#include "tensor/onednn_sgemm.hpp"

namespace ringtrain::host_parallel {
namespace {

struct Job {
  std::int64_t pieces = 0;
  const std::function<void(std::int64_t, int)>* body = nullptr;
  std::atomic<std::int64_t> next{0};
  std::mutex error_mutex;
  std::exception_ptr error;
};

void run_pieces(void* data) {
  Job& job = *static_cast<Job*>(data);
  const int worker = omp_get_thread_num();
  for (std::int64_t piece = job.next.fetch_add(1); piece < job.pieces; piece = job.next.fetch_add(1)) {
    try {
      (*job.body)(piece, worker);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(job.error_mutex);
      if (!job.error) job.error = std::current_exception();
    }
  }
}

}  // namespace

int workers(std::int64_t pieces, int max_workers) {
  if (pieces <= 1 || max_workers <= 1 || omp_in_parallel() != 0) return 1;
  return static_cast<int>(std::min<std::int64_t>({pieces, blas::threads(), max_workers}));
}

void for_each(std::int64_t pieces, const std::function<void(std::int64_t, int)>& body, int max_workers) {
  const int team = workers(pieces, max_workers);
  if (team <= 1) {
    for (std::int64_t piece = 0; piece < pieces; ++piece) body(piece, 0);
    return;
  }
  blas::onednn::use_threads(blas::threads());  // the team's workers block every signal
  Job job;
  job.pieces = pieces;
  job.body = &body;
  GOMP_parallel(run_pieces, &job, static_cast<unsigned>(team), 0);
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace ringtrain::host_parallel
