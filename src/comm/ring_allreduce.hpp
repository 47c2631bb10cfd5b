// Our ring over MPI point-to-point: allreduce = reduce-scatter then allgather on the shard
// layout of shard_range, each phase also on its own. Each segment moves in bounded slices
// through scratch buffers that are reused across calls, with the next slices' transfers
// posted before the current one is summed.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <memory>

#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain::comm {

// Largest piece of a segment sent in one message (bytes on the wire). Bounds the scratch
// buffers and keeps every MPI count far below INT_MAX; small enough that a slice being summed
// stays in L2 and that the pipeline fills quickly, large enough that per-message costs are
// noise next to the copies.
inline constexpr std::size_t kSliceBytes = std::size_t{1} << 20;

// Slices in flight in each direction: two lets slice k+1 travel while slice k is summed.
inline constexpr int kRingSlots = 2;

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
// where this process is `rank` of `size`, the data travelling as `wire` (from
// wire_dtype_for). Collective: every rank calls it with the same count, dtype and wire.
// Every segment is reduced on one rank and then copied, so all ranks end bitwise identical.
// Waits yield the core (yield_wait.hpp).
void ring_allreduce_sum(MPI_Comm comm, int rank, int size, void* data, std::size_t count, DType dtype, DType wire,
                        ScratchBuffer& scratch);
// The reduce-scatter phase of ring_allreduce_sum alone (same arguments): this rank's shard
// (shard_range) ends bitwise as ring_allreduce_sum leaves it; the rest holds partial sums.
void ring_reduce_scatter_sum(MPI_Comm comm, int rank, int size, void* data, std::size_t count, DType dtype, DType wire,
                             ScratchBuffer& scratch);
// The allgather phase alone: every rank's shard is copied to all ranks, as its bits (any dtype).
void ring_allgather(MPI_Comm comm, int rank, int size, void* data, std::size_t count, DType dtype,
                    ScratchBuffer& scratch);

}  // namespace ringtrain::comm
