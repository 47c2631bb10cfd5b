// AllreduceAlgo <-> its config spelling ("ring", "mpi"), so that comm.allreduce in a run's
// config picks the MPI backend's allreduce and reports name the one that ran.
#include <string_view>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {

AllreduceAlgo parse_allreduce_algo(std::string_view value, std::string_view key) {
  if (value == "ring") return AllreduceAlgo::ring;
  if (value == "mpi") return AllreduceAlgo::mpi;
  throw ConfigError(fmt::format("{}: unknown value '{}' (known: ring, mpi)", key, value));
}

std::string_view allreduce_algo_name(AllreduceAlgo algo) {
  switch (algo) {
    case AllreduceAlgo::ring: return "ring";
    case AllreduceAlgo::mpi: return "mpi";
  }
  return "?";
}

}  // namespace ringtrain
