// The spellings of the communicator's options: AllreduceAlgo -> "ring" / "mpi" (reports name
// the one that ran) and the wire dtype "f32" / "bf16" of command-line options such as
// `bench allreduce --wire-dtype` (the config's comm.* keys are declared in train_config.cpp).
#include <string_view>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {

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
