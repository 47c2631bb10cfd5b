// The shared-memory collectives. Every rank owns one part of a POSIX shared-memory object:
// three round counters (each on its own cache lines) and kShmSlots staging slots. Round t of
// a call goes through slot t % kShmSlots in up to three phases, each published by raising a
// counter to t+1 and awaited on the peers' counters (shared_counter.hpp: poll, then sleep):
//   stage   copy the pieces peers own into my slot                   -> staged
//   reduce  my piece = all ranks' contributions in rank order (mine
//           in its place, the peers' from their slots); the result
//           goes to my data and into my slot as it travels            -> reduced
//   gather  copy each peer's result from its slot into my data        -> done
// reduce-scatter ends a round after reduce (done); allgather stages its own piece and gathers
// the peers' staged ones. allreduce cuts each round among the ranks near-equally (balanced
// for any count), the others cut the shards of shard_range into slices; the fixed summation
// order makes the sums the same either way. A rank stages round t+1 before gathering round t,
// and reuses a slot only when every peer is done with the round that used it last. Counters
// only grow, so calls need no reset. Writes to the slot use the round's StoreChoice.
#include "comm/shm_allreduce.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "comm/segments.hpp"
#include "comm/shared_counter.hpp"
#include "check/mpi_check.hpp"
#include "ringtrain/comm/shard.hpp"
#include "ringtrain/core/log.hpp"

namespace ringtrain::comm {
namespace {

// Counters sit two cache lines apart (adjacent-line prefetch pairs lines), so that a peer
// polling one is not disturbed by writes to the others.
constexpr std::size_t kCounterStride = 128;
// Counters first, then the slots from a page boundary.
constexpr std::size_t kHeaderBytes = 4096;
constexpr std::size_t kPartBytes = kHeaderBytes + kShmSlots * kShmSlotBytes;

// Stage phases smaller than this use plain stores untimed: they are latency-bound, and the
// clock's resolution would make their timing noise.
constexpr std::size_t kTimedStageBytes = std::size_t{64} << 10;
// Streaming stores are chosen when plain ones take this much longer: plain stores also leave
// the data in cache for this rank's own later reads, which the stage time does not show.
constexpr double kStreamGain = 2.0;
// Every this many timed stage phases the kind not in use is timed again.
constexpr std::uint64_t kProbeEvery = 64;
// Weight of a new time in a kind's running estimate: one outlier (a preempted phase) moves it
// only halfway, a real change (vCPUs moved) is followed within two or three timings.
constexpr double kNewTimeWeight = 0.5;

// A name no other object on this node has: rank 0's pid, a per-process sequence number (one
// object per communicator) and the clock, in case another pid namespace shares /dev/shm.
std::string object_name() {
  static std::atomic<unsigned> sequence{0};
  const auto ticks = std::chrono::steady_clock::now().time_since_epoch().count();
  return fmt::format("/ringtrain-{}-{}-{:x}", ::getpid(), sequence++, static_cast<unsigned long long>(ticks));
}

std::string failed(const char* call) { return fmt::format("{}: {}", call, std::strerror(errno)); }

// Where rank q's piece of one round lies: at data[data...) in the caller's buffer and at
// [slot...) in every rank's staging slot, `length` elements.
struct Piece {
  std::size_t data;
  std::size_t slot;
  std::size_t length;
};

// Elements of C's wire type one slot holds.
template <typename C>
std::size_t per_round() {
  return kShmSlotBytes / sizeof(typename C::Wire);
}

}  // namespace

// How a call's `count` elements are cut into rounds of at most one slot, the same on every
// rank. Contiguous: round k is the k-th slot-full of the data, cut among the ranks by
// Segments. Sharded: round k is slice k of every rank's shard (shard_range), rank q's slice at
// q * slice in the slot; the rounds are those of the largest shard (shard 0).
class ShmRounds {
 public:
  static ShmRounds contiguous(std::size_t count, std::size_t per_round, int size) {
    return ShmRounds(count, size, /*sharded=*/false, per_round, (count + per_round - 1) / per_round);
  }
  static ShmRounds sharded(std::size_t count, std::size_t per_round, int size) {
    // Slices of whole shard units where the slot allows (aligned copies), at least one element.
    const std::size_t units = per_round / static_cast<std::size_t>(size) / kShardUnit;
    const std::size_t slice =
        units > 0 ? units * kShardUnit : std::max<std::size_t>(1, per_round / static_cast<std::size_t>(size));
    const std::size_t largest = shard(count, size, 0).count;
    return ShmRounds(count, size, /*sharded=*/true, slice, (largest + slice - 1) / slice);
  }

  std::uint64_t count() const { return rounds_; }

  Piece piece(std::uint64_t k, int q) const {
    if (sharded_) {
      const auto own = shard(count_, size_, q);
      const std::size_t length = slice_length(own.count, k, step_);
      const std::size_t begin = length > 0 ? k * step_ : own.count;  // empty: stay inside the buffer
      return {own.offset + begin, static_cast<std::size_t>(q) * step_, length};
    }
    const std::size_t base = k * step_;
    const Segments seg(std::min(step_, count_ - base), size_);
    return {base + seg.begin(q), seg.begin(q), seg.length(q)};
  }

 private:
  struct Range {
    std::size_t offset, count;
  };
  static Range shard(std::size_t count, int size, int q) {
    const ArenaRange r = shard_range(static_cast<std::int64_t>(count), size, q);
    return {static_cast<std::size_t>(r.offset), static_cast<std::size_t>(r.count)};
  }
  ShmRounds(std::size_t count, int size, bool sharded, std::size_t step, std::uint64_t rounds)
      : count_(count), size_(size), sharded_(sharded), step_(step), rounds_(rounds) {}

  std::size_t count_;
  int size_;
  bool sharded_;
  std::size_t step_;  // elements per round (contiguous) or per rank's slice (sharded)
  std::uint64_t rounds_;
};

Store StoreChoice::next() const {
  const double plain = ns_per_byte_[static_cast<int>(Store::plain)];
  const double stream = ns_per_byte_[static_cast<int>(Store::stream)];
  if (plain == 0) return Store::plain;
  if (stream == 0) return Store::stream;
  const Store best = plain > kStreamGain * stream ? Store::stream : Store::plain;
  const Store other = best == Store::plain ? Store::stream : Store::plain;
  return measured_ % kProbeEvery == kProbeEvery - 1 ? other : best;
}

void StoreChoice::record(Store store, std::size_t bytes, std::chrono::steady_clock::duration time) {
  const double sample = std::chrono::duration<double, std::nano>(time).count() / static_cast<double>(bytes);
  double& estimate = ns_per_byte_[static_cast<int>(store)];
  estimate = estimate == 0 ? sample : estimate + kNewTimeWeight * (sample - estimate);
  ++measured_;
}

std::unique_ptr<ShmAllreduce> ShmAllreduce::create(MPI_Comm comm) {
  int rank = 0, size = 1, node_size = 0;
  RT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  RT_MPI_CHECK(MPI_Comm_size(comm, &size));
  MPI_Comm node = MPI_COMM_NULL;
  RT_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  RT_MPI_CHECK(MPI_Comm_size(node, &node_size));
  RT_MPI_CHECK(MPI_Comm_free(&node));
  // All ranks on one node see node_size == size; otherwise every node's group is smaller.
  if (node_size != size) return nullptr;

  // Rank 0 creates and sizes the object, the others open it by the name it broadcasts; any
  // failure anywhere is agreed on before anyone touches the memory.
  const std::size_t total = kPartBytes * static_cast<std::size_t>(size);
  char name[96] = {};
  std::string error;
  int fd = -1;
  if (rank == 0) {
    const std::string n = object_name();
    std::strncpy(name, n.c_str(), sizeof name - 1);
    fd = ::shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      error = failed("shm_open");
    } else if (const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(total)); rc != 0) {
      // Allocated now, not on first touch: a full /dev/shm is this agreed fallback, never a
      // SIGBUS in the middle of a step.
      errno = rc;
      error = failed("posix_fallocate (/dev/shm full?)");
    }
  }
  RT_MPI_CHECK(MPI_Bcast(name, sizeof name, MPI_CHAR, 0, comm));
  if (rank != 0) {
    fd = ::shm_open(name, O_RDWR, 0600);
    if (fd < 0) error = failed("shm_open");
  }
  void* base = MAP_FAILED;
  if (error.empty()) {
    base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) error = failed("mmap");
  }
  if (fd >= 0) ::close(fd);  // the mapping keeps the object alive
  int ok = error.empty() ? 1 : 0, all_ok = 0;
  RT_MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm));
  // Everyone has opened the object or given up: the name goes, the memory lives while mapped,
  // and nothing is left behind in /dev/shm however the job ends.
  if (rank == 0 && fd >= 0 && ::shm_unlink(name) != 0)
    log::warn("communicator: {} (/dev/shm{} stays behind)", failed("shm_unlink"), name);
  if (!all_ok) {
    if (!error.empty()) log::warn("communicator: no shared memory for the ring ({}), using MPI messages", error);
    if (base != MAP_FAILED) ::munmap(base, total);
    return nullptr;
  }
  auto shm = std::unique_ptr<ShmAllreduce>(new ShmAllreduce(rank, size, static_cast<std::byte*>(base), total));
  // First touch of the slots by their owner, here rather than in the first call (fresh pages
  // are slow). Not the counters: the object starts zeroed, and a peer that is already waiting
  // may have announced itself as a sleeper there (zeroing that would lose its wake-up).
  std::memset(shm->part(rank) + kHeaderBytes, 0, kPartBytes - kHeaderBytes);
  return shm;
}

ShmAllreduce::ShmAllreduce(int rank, int size, std::byte* base, std::size_t mapped)
    : rank_(rank), size_(size), base_(base), mapped_(mapped), sources_(static_cast<std::size_t>(size)) {}

ShmAllreduce::~ShmAllreduce() {
  if (::munmap(base_, mapped_) != 0) log::warn("communicator: {}", failed("munmap"));
}

std::byte* ShmAllreduce::part(int rank) const { return base_ + static_cast<std::size_t>(rank) * kPartBytes; }

template <typename Wire>
Wire* ShmAllreduce::slot(int rank, std::uint64_t round) const {
  return reinterpret_cast<Wire*>(part(rank) + kHeaderBytes + (round % kShmSlots) * kShmSlotBytes);
}

SharedCounter& ShmAllreduce::counter(int rank, Counter c) const {
  return *reinterpret_cast<SharedCounter*>(part(rank) + static_cast<std::size_t>(c) * kCounterStride);
}

void ShmAllreduce::publish(Counter c, std::uint64_t value) const {
  store_fence();  // streaming stores are not ordered by the counter's store alone
  raise_counter(counter(rank_, c), value);
}

void ShmAllreduce::wait_for_peers(Counter c, std::uint64_t value) const {
  for (int q = 0; q < size_; ++q)
    if (q != rank_) wait_for_counter(counter(q, c), value);
}

void ShmAllreduce::allreduce_sum(void* data, std::size_t count, DType dtype, DType wire) {
  if (count == 0) return;  // every rank sees the same count: all skip the round together
  with_codec(dtype, wire, [&](auto codec) {
    using C = decltype(codec);
    run<C>(Op::allreduce, static_cast<typename C::Data*>(data), ShmRounds::contiguous(count, per_round<C>(), size_));
  });
}

void ShmAllreduce::reduce_scatter_sum(void* data, std::size_t count, DType dtype, DType wire) {
  if (count == 0) return;
  with_codec(dtype, wire, [&](auto codec) {
    using C = decltype(codec);
    run<C>(Op::reduce_scatter, static_cast<typename C::Data*>(data), ShmRounds::sharded(count, per_round<C>(), size_));
  });
}

void ShmAllreduce::allgather(void* data, std::size_t count, DType dtype) {
  if (count == 0) return;
  with_copy_codec(dtype, [&](auto codec) {
    using C = decltype(codec);
    run<C>(Op::allgather, static_cast<typename C::Data*>(data), ShmRounds::sharded(count, per_round<C>(), size_));
  });
}

template <typename C>
void ShmAllreduce::run(Op op, typename C::Data* data, const ShmRounds& rounds) {
  const bool stage_own = op == Op::allgather;
  Store store = stage<C>(rounds_, data, rounds, 0, stage_own);
  for (std::uint64_t k = 0; k < rounds.count(); ++k) {
    const std::uint64_t round = rounds_ + k;
    if (op != Op::allgather) reduce<C>(round, data, rounds, k, store);
    if (op == Op::reduce_scatter) publish(kDone, round + 1);  // peers' slots are read only to reduce
    const Store next = k + 1 < rounds.count() ? stage<C>(round + 1, data, rounds, k + 1, stage_own) : store;
    if (op != Op::reduce_scatter) gather<C>(round, data, rounds, k, op == Op::allgather ? kStaged : kReduced);
    store = next;
  }
  rounds_ += rounds.count();
}

// Stages this rank's own piece (`own`) or the pieces peers reduce. Returns the store kind it
// used, which the round's reduce uses too.
template <typename C>
Store ShmAllreduce::stage(std::uint64_t round, const typename C::Data* data, const ShmRounds& rounds, std::uint64_t k,
                          bool own) {
  // Every peer must be done with the round that used this slot last (it reads my slot until then).
  if (round >= kShmSlots) wait_for_peers(kDone, round - kShmSlots + 1);
  std::size_t bytes = 0;
  for (int q = 0; q < size_; ++q)
    if ((q == rank_) == own) bytes += rounds.piece(k, q).length * sizeof(typename C::Wire);
  const bool timed = bytes >= kTimedStageBytes;
  const Store store = timed ? stores_.next() : Store::plain;
  const auto start = std::chrono::steady_clock::now();
  auto* mine = slot<typename C::Wire>(rank_, round);
  for (int q = 0; q < size_; ++q) {
    if ((q == rank_) != own) continue;
    const Piece p = rounds.piece(k, q);
    encode<C>(mine + p.slot, data + p.data, p.length, store);
  }
  publish(kStaged, round + 1);  // its fence makes the timing include the streaming stores' drain
  if (timed) stores_.record(store, bytes, std::chrono::steady_clock::now() - start);
  return store;
}

template <typename C>
void ShmAllreduce::reduce(std::uint64_t round, typename C::Data* data, const ShmRounds& rounds, std::uint64_t k,
                          Store store) {
  wait_for_peers(kStaged, round + 1);
  const Piece mine = rounds.piece(k, rank_);
  int nsrc = 0;
  for (int q = 0; q < size_; ++q)
    if (q != rank_)
      sources_[static_cast<std::size_t>(nsrc++)] =
          reinterpret_cast<const std::byte*>(slot<typename C::Wire>(q, round) + mine.slot);
  reduce_sources<C>(data + mine.data, slot<typename C::Wire>(rank_, round) + mine.slot, sources_.data(), nsrc, rank_,
                    mine.length, store);
  publish(kReduced, round + 1);
}

// Copies the peers' pieces out of their slots once they have published `ready` for the round.
template <typename C>
void ShmAllreduce::gather(std::uint64_t round, typename C::Data* data, const ShmRounds& rounds, std::uint64_t k,
                          Counter ready) {
  wait_for_peers(ready, round + 1);
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const Piece p = rounds.piece(k, q);
    decode<C>(data + p.data, slot<typename C::Wire>(q, round) + p.slot, p.length);
  }
  publish(kDone, round + 1);
}

}  // namespace ringtrain::comm
