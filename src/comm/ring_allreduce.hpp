// Our ring allreduce over MPI point-to-point: reduce-scatter then allgather, each segment
// moved in bounded slices through a scratch buffer that is reused across calls.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <memory>

#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain::comm {

// Largest piece of a segment sent in one message. Bounds the scratch buffer (one slice) and
// keeps every MPI count far below INT_MAX; at 4 MiB the per-message cost is noise next to
// the copy, and the slice still fits comfortably in L2/L3 while it is being added.
inline constexpr std::size_t kSliceBytes = std::size_t{4} << 20;

// A byte buffer that only grows. Never shrunk or freed per call: first touch of fresh pages
// is slow on our machines, and the hot path must not allocate. Not zeroed (a receive fills it).
class ScratchBuffer {
 public:
  std::byte* reserve(std::size_t bytes);
  std::size_t capacity() const { return capacity_; }

 private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t capacity_ = 0;
};

// In-place sum of `count` elements of `dtype` (a summable one) over all ranks of `comm`,
// where this process is `rank` of `size`. Collective: every rank calls it with the same
// count and dtype. Every segment is reduced on one rank and then copied, so all ranks end
// bitwise identical.
void ring_allreduce_sum(MPI_Comm comm, int rank, int size, void* data, std::size_t count, DType dtype,
                        ScratchBuffer& scratch);

}  // namespace ringtrain::comm
