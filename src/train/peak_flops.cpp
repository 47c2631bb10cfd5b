// measure_sgemm_peak (see header).
#include "ringtrain/train/peak_flops.hpp"

#include <algorithm>

#include "ringtrain/comm/communicator.hpp"
#include "tensor/blas.hpp"

namespace ringtrain {

SgemmPeak measure_sgemm_peak(Communicator& comm, int world, std::int64_t n, double seconds, int repeats) {
  blas::SgemmTimer timer(n);
  double once = timer.seconds(1);            // warm-up, and the per-call time that sizes the timed runs
  comm.allreduce_sum(&once, 1, DType::f64);  // the same iteration count on every rank
  SgemmPeak peak;
  peak.library = blas::describe();
  peak.iterations = std::max<std::int64_t>(1, static_cast<std::int64_t>(seconds / (once / world)));
  for (int r = 0; r < repeats; ++r) {
    comm.barrier();
    double gflops = timer.gflops(peak.iterations, timer.seconds(peak.iterations));
    comm.allreduce_sum(&gflops, 1, DType::f64);
    peak.aggregate.push_back(gflops);
  }
  return peak;
}

}  // namespace ringtrain
