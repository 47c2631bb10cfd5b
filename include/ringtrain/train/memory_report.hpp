// What one rank holds for training, as `summary.json` ("memory") and `ringtrain bench train`
// report it: each part of a DataParallelStep's memory at its largest over the ranks, and the
// largest peak resident set, so that a user sees what a ZeRO stage saves.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ringtrain/train/data_parallel_step.hpp"

namespace ringtrain {

class Communicator;

// This process's peak resident set (VmHWM of /proc/self/status) in bytes; -1 where unknown.
std::int64_t own_peak_rss();

struct MemoryReport {
  StepMemory largest;         // each part at its largest over the ranks
  std::int64_t peak_rss = 0;  // the largest peak resident set (includes MPI and libraries); -1: unknown
  // (name, bytes) in report order: parameters, gathered_parameters, gradients, optimizer_state,
  // activations, comm_buffers, peak_rss.
  std::vector<std::pair<std::string_view, std::int64_t>> fields() const;
  // "parameters 1.2 MiB, gradients 1.2 MiB, ..." for people.
  std::string describe() const;
};

// Collective over comm: every rank gets the same report.
MemoryReport gather_memory_report(Communicator& comm, const StepMemory& mine);

}  // namespace ringtrain
