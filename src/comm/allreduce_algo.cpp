// The config spellings of the communicator's options: AllreduceAlgo <-> "ring" / "mpi"
// (comm.allreduce picks the MPI backend's allreduce, reports name the one that ran) and the
// wire dtype "f32" / "bf16" (comm.wire_dtype).
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

DType parse_wire_dtype(std::string_view value, std::string_view key) {
  if (value == "f32") return DType::f32;
  if (value == "bf16") return DType::bf16;
  throw ConfigError(fmt::format("{}: unknown value '{}' (known: f32, bf16)", key, value));
}

}  // namespace ringtrain
