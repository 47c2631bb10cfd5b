// The ring allreduce: `size` near-equal contiguous segments; size-1 reduce-scatter steps
// leave each rank owning one fully reduced segment, size-1 allgather steps copy them around.
#include "comm/ring_allreduce.hpp"

#include <algorithm>

#include "comm/reduce_kernels.hpp"
#include "mpi/mpi_check.hpp"

namespace ringtrain::comm {
namespace {

// Ring messages travel on the communicator's own duplicate, so one tag is enough: MPI keeps
// messages between a pair of ranks on one (comm, tag) in order, which pairs slices up.
constexpr int kRingTag = 7301;

// Segment i of `count` elements split `size` ways: the first count % size segments get one
// extra element. Segments are empty when count < size.
struct Segments {
  std::size_t base;
  std::size_t extra;
  std::size_t begin(int i) const {
    const auto u = static_cast<std::size_t>(i);
    return u * base + std::min(u, extra);
  }
  std::size_t length(int i) const { return base + (static_cast<std::size_t>(i) < extra ? 1 : 0); }
};

// Elements of slice k of a segment of `length` elements cut in slices of `slice` elements.
std::size_t slice_length(std::size_t length, std::size_t k, std::size_t slice) {
  const std::size_t offset = k * slice;
  return offset >= length ? 0 : std::min(slice, length - offset);
}

}  // namespace

std::byte* ScratchBuffer::reserve(std::size_t bytes) {
  if (bytes > capacity_) {
    data_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
    capacity_ = bytes;
  }
  return data_.get();
}

void ring_allreduce_sum(MPI_Comm comm, int rank, int size, void* data, std::size_t count, DType dtype,
                        ScratchBuffer& scratch) {
  // Every rank sees the same count, so all return here together: no message is left behind.
  if (size <= 1 || count == 0) return;
  const std::size_t esize = dtype_size(dtype);
  auto* bytes = static_cast<std::byte*>(data);
  const auto usize = static_cast<std::size_t>(size);
  const Segments seg{count / usize, count % usize};
  const std::size_t max_segment = seg.base + (seg.extra > 0 ? 1 : 0);
  const std::size_t slice = std::min(max_segment, std::max<std::size_t>(1, kSliceBytes / esize));
  // The slice count comes from the largest segment, not the ones this rank moves, so that
  // sender and receiver of every step post the same number of messages (some of them empty
  // where a segment is one element shorter); a per-rank count would mispair messages.
  const std::size_t slices = (max_segment + slice - 1) / slice;
  // Each slice is one blocking Sendrecv followed by its add. Overlapping the add of slice k
  // with the transfer of slice k+1 (Irecv into a second scratch slice) would buy little here:
  // CPU ranks have no MPI progress thread and the shared-memory transport copies on the
  // calling core, so the transfer only advances inside MPI calls anyway.
  std::byte* recv_buf = scratch.reserve(slice * esize);
  const int right = (rank + 1) % size;
  const int left = (rank - 1 + size) % size;

  // Reduce-scatter: at step s send segment rank-s (partially reduced at step s-1), receive
  // segment rank-s-1 into scratch and add it into place. After size-1 steps this rank holds
  // the full sum of segment rank+1.
  for (int s = 0; s + 1 < size; ++s) {
    const int send_seg = (rank - s + size) % size;
    const int recv_seg = (rank - s - 1 + 2 * size) % size;
    for (std::size_t k = 0; k < slices; ++k) {
      const std::size_t send_n = slice_length(seg.length(send_seg), k, slice);
      const std::size_t recv_n = slice_length(seg.length(recv_seg), k, slice);
      std::byte* send_at = bytes + (seg.begin(send_seg) + k * slice) * esize;
      std::byte* recv_at = bytes + (seg.begin(recv_seg) + k * slice) * esize;
      RT_MPI_CHECK(MPI_Sendrecv(send_at, static_cast<int>(send_n * esize), MPI_BYTE, right, kRingTag, recv_buf,
                                static_cast<int>(recv_n * esize), MPI_BYTE, left, kRingTag, comm,
                                MPI_STATUS_IGNORE));
      add_into(recv_at, recv_buf, recv_n, dtype);
    }
  }

  // Allgather: at step s send segment rank+1-s (complete), receive segment rank-s straight
  // into place; the bytes are copies of the one reduction, hence identical everywhere.
  for (int s = 0; s + 1 < size; ++s) {
    const int send_seg = (rank + 1 - s + size) % size;
    const int recv_seg = (rank - s + size) % size;
    for (std::size_t k = 0; k < slices; ++k) {
      const std::size_t send_n = slice_length(seg.length(send_seg), k, slice);
      const std::size_t recv_n = slice_length(seg.length(recv_seg), k, slice);
      std::byte* send_at = bytes + (seg.begin(send_seg) + k * slice) * esize;
      std::byte* recv_at = bytes + (seg.begin(recv_seg) + k * slice) * esize;
      RT_MPI_CHECK(MPI_Sendrecv(send_at, static_cast<int>(send_n * esize), MPI_BYTE, right, kRingTag, recv_at,
                                static_cast<int>(recv_n * esize), MPI_BYTE, left, kRingTag, comm,
                                MPI_STATUS_IGNORE));
    }
  }
}

}  // namespace ringtrain::comm
