// Communicator's default collectives: the sharding halves for backends that lack them fail
// at once, alike on every rank (no peer is left waiting in a collective).
#include "ringtrain/comm/communicator.hpp"

#include "ringtrain/core/error.hpp"

namespace ringtrain {

void Communicator::reduce_scatter_sum(void*, std::size_t, DType) {
  throw CommError(fmt::format("reduce_scatter_sum: not supported by {} yet", name()));
}

void Communicator::allgather(void*, std::size_t, DType) {
  throw CommError(fmt::format("allgather: not supported by {} yet", name()));
}

}  // namespace ringtrain
