// host_parallel in a build without oneDNN, so without the OpenMP runtime it brings: every loop
// on the calling thread (host_parallel.hpp).
#include "tensor/host_parallel.hpp"

namespace ringtrain::host_parallel {

int workers(std::int64_t /*pieces*/, int /*max_workers*/) { return 1; }

void for_each(std::int64_t pieces, const std::function<void(std::int64_t, int)>& body, int /*max_workers*/) {
  for (std::int64_t piece = 0; piece < pieces; ++piece) body(piece, 0);
}

}  // namespace ringtrain::host_parallel
