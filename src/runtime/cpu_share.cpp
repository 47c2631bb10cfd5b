// CPU threads per rank: the automatic count and the oversubscription warning (cpu_share.hpp).
#include "runtime/cpu_share.hpp"

#include <sched.h>

#include <algorithm>
#include <thread>

#include <fmt/format.h>

namespace ringtrain {
namespace {

int cpus_in_affinity_mask() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

}  // namespace

CpuShare this_process_cpu_share(int local_ranks) {
  return CpuShare{.hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency())),
                  .affinity = cpus_in_affinity_mask(),
                  .local_ranks = std::max(1, local_ranks)};
}

int automatic_threads(const CpuShare& share) {
  const int per_rank = std::max(1, share.hardware / share.local_ranks);
  return share.affinity > 0 ? std::min(per_rank, share.affinity) : per_rank;
}

std::string oversubscription(const CpuShare& share, int threads) {
  if (share.affinity > 0 && threads > share.affinity) {
    return fmt::format(
        "runtime.threads (or --threads) = {} but this rank is bound to {} CPU{}: its threads share {}; launch with "
        "`mpirun --bind-to none` or `--map-by slot:PE={}`, or `srun --cpus-per-task={}`, or set "
        "runtime.threads = 0 (automatic)",
        threads, share.affinity, share.affinity == 1 ? "" : "s", share.affinity == 1 ? "it" : "them", threads, threads);
  }
  if (threads * share.local_ranks > share.hardware && threads <= automatic_threads(share)) {
    return fmt::format(  // automatic gives as many already: only fewer ranks help
        "{} ranks on this node of {} CPUs at {} thread{} each: {} threads share them; run at most {} ranks per node",
        share.local_ranks, share.hardware, threads, threads == 1 ? "" : "s", threads * share.local_ranks,
        share.hardware);
  }
  if (threads * share.local_ranks > share.hardware) {
    return fmt::format(
        "runtime.threads (or --threads) = {} with {} ranks on this node of {} CPUs: {} threads share them; set "
        "runtime.threads = 0 (automatic: {} per rank) or run fewer ranks per node",
        threads, share.local_ranks, share.hardware, threads * share.local_ranks, automatic_threads(share));
  }
  return {};
}

}  // namespace ringtrain
