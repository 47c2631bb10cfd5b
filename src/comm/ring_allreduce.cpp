// The ring allreduce: `size` near-equal contiguous segments; size-1 reduce-scatter steps
// leave each rank owning one fully reduced segment, size-1 allgather steps copy them around.
// Each step streams its segment in slices with kRingSlots sends and receives in flight.
#include "comm/ring_allreduce.hpp"

#include <algorithm>
#include <type_traits>

#include "comm/reduce_kernels.hpp"
#include "comm/segments.hpp"
#include "comm/yield_wait.hpp"
#include "check/mpi_check.hpp"

namespace ringtrain::comm {
namespace {

// Ring messages travel on the communicator's own duplicate, so one tag is enough: MPI keeps
// messages between a pair of ranks on one (comm, tag) in order, which pairs slices up.
constexpr int kRingTag = 7301;

// Elements of slice k of a segment of `length` elements cut in slices of `slice` elements.
std::size_t slice_length(std::size_t length, std::size_t k, std::size_t slice) {
  const std::size_t offset = k * slice;
  return offset >= length ? 0 : std::min(slice, length - offset);
}

// Completes `req` (at once for MPI_REQUEST_NULL), yielding the core while it is pending.
// MPI_Test also drives the transfer: without a progress thread it only moves inside MPI calls.
void wait_request(MPI_Request& req) {
  wait_until([&] {
    int done = 0;
    RT_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    return done != 0;
  });
}

template <typename C>
class Ring {
  using Data = typename C::Data;
  using Wire = typename C::Wire;
  // Data that travels as it is stored is sent from place, and received in place when the
  // step only stores it; otherwise it goes through the scratch slots.
  static constexpr bool kDirect = std::is_same_v<Data, Wire>;

 public:
  Ring(MPI_Comm comm, int rank, int size, Data* data, std::size_t count, ScratchBuffer& scratch)
      : comm_(comm), rank_(rank), size_(size), data_(data), seg_(count, size) {
    // The slice count comes from the largest segment, not the ones this rank moves, so that
    // sender and receiver of every step post the same number of messages (some of them
    // empty where a segment is one element shorter); a per-rank count would mispair messages.
    slice_ = std::min(seg_.max_length(), std::max<std::size_t>(1, kSliceBytes / sizeof(Wire)));
    slices_ = (seg_.max_length() + slice_ - 1) / slice_;
    const std::size_t slot_bytes = slice_ * sizeof(Wire);
    std::byte* base = scratch.reserve(slot_bytes * kRingSlots * (kDirect ? 1 : 2));
    for (int s = 0; s < kRingSlots; ++s) {
      recv_slot_[s] = reinterpret_cast<Wire*>(base + static_cast<std::size_t>(s) * slot_bytes);
      if constexpr (!kDirect)
        send_slot_[s] = reinterpret_cast<Wire*>(base + static_cast<std::size_t>(kRingSlots + s) * slot_bytes);
    }
  }

  void run() {
    const int right = (rank_ + 1) % size_;
    const int left = (rank_ - 1 + size_) % size_;
    // Reduce-scatter: at step s send segment rank-s (partially reduced at step s-1), receive
    // segment rank-s-1 and add it into place. After size-1 steps this rank holds the full
    // sum of segment rank+1 (rounded as it will travel).
    for (int s = 0; s + 1 < size_; ++s) step(right, left, mod(rank_ - s), mod(rank_ - s - 1), true);
    // Allgather: at step s send segment rank+1-s (complete), receive segment rank-s; the
    // bytes are copies of the one reduction, hence identical everywhere.
    for (int s = 0; s + 1 < size_; ++s) step(right, left, mod(rank_ + 1 - s), mod(rank_ - s), false);
  }

 private:
  int mod(int i) const { return (i % size_ + size_) % size_; }
  Data* at(int segment, std::size_t k) const { return data_ + seg_.begin(segment) + k * slice_; }
  int bytes(std::size_t n) const { return static_cast<int>(n * sizeof(Wire)); }

  // Sends segment send_seg to `right` and receives segment recv_seg from `left`, slice by
  // slice; a received slice is summed into place (reduce) or stored there.
  void step(int right, int left, int send_seg, int recv_seg, bool reduce) {
    const bool recv_in_place = kDirect && !reduce;
    MPI_Request send_req[kRingSlots], recv_req[kRingSlots];
    std::fill(std::begin(send_req), std::end(send_req), MPI_REQUEST_NULL);
    std::fill(std::begin(recv_req), std::end(recv_req), MPI_REQUEST_NULL);
    auto post_recv = [&](std::size_t k) {
      const std::size_t n = slice_length(seg_.length(recv_seg), k, slice_);
      void* to = recv_in_place ? static_cast<void*>(at(recv_seg, k)) : recv_slot_[k % kRingSlots];
      RT_MPI_CHECK(MPI_Irecv(to, bytes(n), MPI_BYTE, left, kRingTag, comm_, &recv_req[k % kRingSlots]));
    };
    for (std::size_t k = 0; k < std::min<std::size_t>(kRingSlots, slices_); ++k) post_recv(k);
    for (std::size_t k = 0; k < slices_; ++k) {
      const int s = static_cast<int>(k % kRingSlots);
      const std::size_t send_n = slice_length(seg_.length(send_seg), k, slice_);
      const std::size_t recv_n = slice_length(seg_.length(recv_seg), k, slice_);
      wait_request(send_req[s]);  // the send that used this slot kRingSlots slices ago
      const void* from = at(send_seg, k);
      if constexpr (!kDirect) {
        encode<C>(send_slot_[s], at(send_seg, k), send_n);
        from = send_slot_[s];
      }
      RT_MPI_CHECK(MPI_Isend(from, bytes(send_n), MPI_BYTE, right, kRingTag, comm_, &send_req[s]));
      wait_request(recv_req[s]);
      if (reduce)
        accumulate<C>(at(recv_seg, k), recv_slot_[s], recv_n);
      else if (!recv_in_place)
        decode<C>(at(recv_seg, k), recv_slot_[s], recv_n);
      if (k + kRingSlots < slices_) post_recv(k + kRingSlots);
    }
    for (MPI_Request& req : send_req) wait_request(req);
  }

  MPI_Comm comm_;
  int rank_;
  int size_;
  Data* data_;
  Segments seg_;
  std::size_t slice_ = 0;   // elements per slice
  std::size_t slices_ = 0;  // slices per segment (of the largest segment)
  Wire* recv_slot_[kRingSlots] = {};
  Wire* send_slot_[kRingSlots] = {};  // only when the data is encoded to travel
};

}  // namespace

std::byte* ScratchBuffer::reserve(std::size_t bytes) {
  if (bytes > capacity_) {
    data_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
    capacity_ = bytes;
  }
  return data_.get();
}

void ring_allreduce_sum(MPI_Comm comm, int rank, int size, void* data, std::size_t count, DType dtype, DType wire,
                        ScratchBuffer& scratch) {
  // Every rank sees the same count, so all return here together: no message is left behind.
  if (size <= 1 || count == 0) return;
  with_codec(dtype, wire, [&](auto codec) {
    using C = decltype(codec);
    Ring<C>(comm, rank, size, static_cast<typename C::Data*>(data), count, scratch).run();
  });
}

}  // namespace ringtrain::comm
