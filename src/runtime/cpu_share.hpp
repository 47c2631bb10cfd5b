// How many CPU threads a rank may use: the automatic count (the node's cores split among its
// ranks, at most the CPUs the rank is bound to), and the warning for a count asked for that the
// rank's CPUs cannot run at once (a launcher that binds each rank to one core, the default of
// `mpirun -np N` for N <= 2, and runtime.threads = 2 run two threads on that core: the GPT example
// at 0.57x of the same two threads unbound).
#pragma once
#include <string>

namespace ringtrain {

struct CpuShare {
  int hardware = 1;     // CPUs of the node (hardware_concurrency)
  int affinity = 0;     // CPUs in this rank's affinity mask; 0: unknown
  int local_ranks = 1;  // ranks on this node
};

// This process's view: the node's CPUs, its affinity mask, and `local_ranks`.
CpuShare this_process_cpu_share(int local_ranks);

// runtime.threads = 0: the node's CPUs divided among its ranks, no more than the rank's mask.
int automatic_threads(const CpuShare& share);

// Empty when `threads` per rank fit; else what oversubscribes and how to launch instead.
std::string oversubscription(const CpuShare& share, int threads);

}  // namespace ringtrain
