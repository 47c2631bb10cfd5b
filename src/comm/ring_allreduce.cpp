// The ring: its segments are the shards of shard_range; size-1 reduce-scatter steps leave
// rank r owning the fully reduced shard r, size-1 allgather steps copy the shards around.
// allreduce runs both phases, reduce_scatter_sum and allgather one each, with the same steps.
// Each step streams its segment in slices with kRingSlots sends and receives in flight.
#include "comm/ring_allreduce.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "comm/reduce_kernels.hpp"
#include "comm/segments.hpp"
#include "comm/yield_wait.hpp"
#include "check/mpi_check.hpp"
#include "ringtrain/comm/shard.hpp"

namespace ringtrain::comm {
namespace {

// Ring messages travel on the communicator's own duplicate, so one tag is enough: MPI keeps
// messages between a pair of ranks on one (comm, tag) in order, which pairs slices up.
constexpr int kRingTag = 7301;

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
      : comm_(comm), rank_(rank), size_(size), data_(data), count_(count) {
    // The slice count comes from the largest segment (shard 0), not the ones this rank moves,
    // so that sender and receiver of every step post the same number of messages (some of
    // them empty where a shard is shorter or empty); a per-rank count would mispair messages.
    const std::size_t largest = segment(0).length;
    slice_ = std::min(largest, std::max<std::size_t>(1, kSliceBytes / sizeof(Wire)));
    slices_ = (largest + slice_ - 1) / slice_;
    const std::size_t slot_bytes = slice_ * sizeof(Wire);
    std::byte* base = scratch.reserve(slot_bytes * kRingSlots * (kDirect ? 1 : 2));
    for (int s = 0; s < kRingSlots; ++s) {
      recv_slot_[s] = reinterpret_cast<Wire*>(base + static_cast<std::size_t>(s) * slot_bytes);
      if constexpr (!kDirect)
        send_slot_[s] = reinterpret_cast<Wire*>(base + static_cast<std::size_t>(kRingSlots + s) * slot_bytes);
    }
  }

  // At step s send segment rank-s-1 (partially reduced at step s-1), receive segment rank-s-2
  // and add it into place. After size-1 steps this rank holds the full sum of its own shard
  // (rounded as it will travel); the sum of shard r starts at rank r+1 and goes round the ring.
  void reduce_scatter() {
    for (int s = 0; s + 1 < size_; ++s) step<true>(segment(mod(rank_ - s - 1)), segment(mod(rank_ - s - 2)));
  }

  // At step s send segment rank-s (complete), receive segment rank-s-1; after a
  // reduce_scatter the bytes are copies of the one reduction, hence identical everywhere.
  void allgather() {
    for (int s = 0; s + 1 < size_; ++s) step<false>(segment(mod(rank_ - s)), segment(mod(rank_ - s - 1)));
  }

 private:
  // Segment i of the data: shard i.
  struct Segment {
    Data* begin;
    std::size_t length;
  };

  int mod(int i) const { return (i % size_ + size_) % size_; }
  Segment segment(int i) const {
    const ArenaRange shard = shard_range(static_cast<std::int64_t>(count_), size_, i);
    return {data_ + shard.offset, static_cast<std::size_t>(shard.count)};
  }
  Data* at(const Segment& seg, std::size_t k) const { return seg.begin + k * slice_; }
  int bytes(std::size_t n) const { return static_cast<int>(n * sizeof(Wire)); }

  // Sends segment send_seg to the right neighbour and receives segment recv_seg from the left
  // one, slice by slice; a received slice is summed into place (kReduce) or stored there.
  template <bool kReduce>
  void step(const Segment& send_seg, const Segment& recv_seg) {
    const int right = mod(rank_ + 1);
    const int left = mod(rank_ - 1);
    constexpr bool recv_in_place = kDirect && !kReduce;
    MPI_Request send_req[kRingSlots], recv_req[kRingSlots];
    std::fill(std::begin(send_req), std::end(send_req), MPI_REQUEST_NULL);
    std::fill(std::begin(recv_req), std::end(recv_req), MPI_REQUEST_NULL);
    auto post_recv = [&](std::size_t k) {
      const std::size_t n = slice_length(recv_seg.length, k, slice_);
      void* to = recv_in_place ? static_cast<void*>(at(recv_seg, k)) : recv_slot_[k % kRingSlots];
      RT_MPI_CHECK(MPI_Irecv(to, bytes(n), MPI_BYTE, left, kRingTag, comm_, &recv_req[k % kRingSlots]));
    };
    for (std::size_t k = 0; k < std::min<std::size_t>(kRingSlots, slices_); ++k) post_recv(k);
    for (std::size_t k = 0; k < slices_; ++k) {
      const int s = static_cast<int>(k % kRingSlots);
      const std::size_t send_n = slice_length(send_seg.length, k, slice_);
      const std::size_t recv_n = slice_length(recv_seg.length, k, slice_);
      wait_request(send_req[s]);  // the send that used this slot kRingSlots slices ago
      const void* from = at(send_seg, k);
      if constexpr (!kDirect) {
        encode<C>(send_slot_[s], at(send_seg, k), send_n);
        from = send_slot_[s];
      }
      RT_MPI_CHECK(MPI_Isend(from, bytes(send_n), MPI_BYTE, right, kRingTag, comm_, &send_req[s]));
      wait_request(recv_req[s]);
      if constexpr (kReduce)
        accumulate<C>(at(recv_seg, k), recv_slot_[s], recv_n);
      else if constexpr (!recv_in_place)
        decode<C>(at(recv_seg, k), recv_slot_[s], recv_n);
      if (k + kRingSlots < slices_) post_recv(k + kRingSlots);
    }
    for (MPI_Request& req : send_req) wait_request(req);
  }

  MPI_Comm comm_;
  int rank_;
  int size_;
  Data* data_;
  std::size_t count_;
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

// Every rank sees the same count, so all return early together: no message is left behind.

void ring_allreduce_sum(MPI_Comm comm, int rank, int size, void* data, std::size_t count, DType dtype, DType wire,
                        ScratchBuffer& scratch) {
  if (size <= 1 || count == 0) return;
  with_codec(dtype, wire, [&](auto codec) {
    using C = decltype(codec);
    Ring<C> ring(comm, rank, size, static_cast<typename C::Data*>(data), count, scratch);
    ring.reduce_scatter();
    ring.allgather();
  });
}

void ring_reduce_scatter_sum(MPI_Comm comm, int rank, int size, void* data, std::size_t count, DType dtype, DType wire,
                             ScratchBuffer& scratch) {
  if (size <= 1 || count == 0) return;
  with_codec(dtype, wire, [&](auto codec) {
    using C = decltype(codec);
    Ring<C>(comm, rank, size, static_cast<typename C::Data*>(data), count, scratch).reduce_scatter();
  });
}

void ring_allgather(MPI_Comm comm, int rank, int size, void* data, std::size_t count, DType dtype,
                    ScratchBuffer& scratch) {
  if (size <= 1 || count == 0) return;
  with_copy_codec(dtype, [&](auto codec) {
    using C = decltype(codec);
    Ring<C>(comm, rank, size, static_cast<typename C::Data*>(data), count, scratch).allgather();
  });
}

}  // namespace ringtrain::comm
