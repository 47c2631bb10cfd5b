// host_parallel's ranges and row pieces, over either for_each (host_parallel.hpp).
#include <algorithm>

#include "tensor/host_parallel.hpp"

namespace ringtrain::host_parallel {

std::int64_t rows_per_piece(std::int64_t width) { return std::max<std::int64_t>(1, kElementGrain / width); }

void for_ranges(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (n <= 0) return;
  const std::int64_t step = std::max<std::int64_t>(1, grain);
  for_each((n + step - 1) / step, [&](std::int64_t piece, int) {
    const std::int64_t begin = piece * step;
    body(begin, std::min(n, begin + step));
  });
}

}  // namespace ringtrain::host_parallel
