// Private: the NCCL unique id exchange, on its own so that tests can check it without a GPU
// (ncclGetUniqueId needs none). Bytes instead of ncclUniqueId keep this header free of nccl.h.
#pragma once
#include <array>
#include <cstddef>

namespace ringtrain {
class Context;
}  // namespace ringtrain

namespace ringtrain::comm {

constexpr std::size_t kNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES (checked where nccl.h is seen)
using NcclUniqueIdBytes = std::array<char, kNcclUniqueIdBytes>;

// Collective over ctx's world: rank 0 makes a fresh id (ncclGetUniqueId) and broadcasts it;
// every rank returns the same bytes. If rank 0 fails, every rank throws the same error.
// Throws NotCompiled in a build without NCCL.
NcclUniqueIdBytes exchange_nccl_unique_id(const Context& ctx);

}  // namespace ringtrain::comm
