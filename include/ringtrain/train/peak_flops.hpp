// The compute peak a run's model FLOP utilization (MFU) is measured against: square sgemms on
// every rank at once (ranks share cores and memory bandwidth, so the aggregate is what a
// data-parallel run can reach). `ringtrain bench gemm` reports it; the trainer measures it
// briefly at the start of a CPU run.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ringtrain {

class Communicator;

struct SgemmPeak {
  std::int64_t iterations = 0;    // sgemms per timed run (the same on every rank)
  std::vector<double> aggregate;  // GFLOP/s summed over the ranks, one per timed run
  std::string library;            // what computed them: "oneDNN 2.6.3 (avx512_core_bf16), 1 thread"
};

// Collective over comm (world ranks): `repeats` timed runs of about `seconds` each of n x n x n
// sgemms, after one warm-up call that sizes them.
SgemmPeak measure_sgemm_peak(Communicator& comm, int world, std::int64_t n, double seconds, int repeats);

}  // namespace ringtrain
