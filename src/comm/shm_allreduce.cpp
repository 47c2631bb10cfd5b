// The shared-memory allreduce. Every rank owns one part of a POSIX shared-memory object:
// three round counters (each on its own cache lines) and kShmSlots staging slots. Round t of
// a call goes through slot t % kShmSlots in three phases, each published by raising a
// counter to t+1 (release) and awaited by reading the peers' counters (acquire):
//   stage   copy the segments peers own into my slot                 -> staged
//   reduce  my segment = mine + each peer's staged copy, in rank order;
//           the result goes to my data and into my slot as it travels -> reduced
//   gather  copy each peer's result from its slot into my data        -> done
// A rank stages round t+1 before gathering round t, and reuses a slot only when every peer
// is done with the round that used it last. Counters only grow, so calls need no reset.
// Writes to the slot (stage, and reduce's copy for the peers) use the round's StoreChoice.
#include "comm/shm_allreduce.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "comm/segments.hpp"
#include "comm/yield_wait.hpp"
#include "check/mpi_check.hpp"
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

}  // namespace

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
    if (fd < 0)
      error = failed("shm_open");
    else if (::ftruncate(fd, static_cast<off_t>(total)) != 0)
      error = failed("ftruncate");
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
  // First touch by the owner, here rather than in the first call (fresh pages are slow). The
  // object starts zeroed, so peers reading these counters meanwhile see the same zeros.
  std::memset(shm->part(rank), 0, kPartBytes);
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

std::uint64_t& ShmAllreduce::counter(int rank, Counter c) const {
  return *reinterpret_cast<std::uint64_t*>(part(rank) + static_cast<std::size_t>(c) * kCounterStride);
}

void ShmAllreduce::publish(Counter c, std::uint64_t value) const {
  store_fence();  // streaming stores are not ordered by the release store alone
  std::atomic_ref<std::uint64_t>(counter(rank_, c)).store(value, std::memory_order_release);
}

void ShmAllreduce::wait_for_peers(Counter c, std::uint64_t value) const {
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    std::atomic_ref<std::uint64_t> peer(counter(q, c));
    wait_until([&] { return peer.load(std::memory_order_acquire) >= value; });
  }
}

void ShmAllreduce::allreduce_sum(void* data, std::size_t count, DType dtype, DType wire) {
  if (count == 0) return;  // every rank sees the same count: all skip the round together
  with_codec(dtype, wire, [&](auto codec) {
    using C = decltype(codec);
    run<C>(static_cast<typename C::Data*>(data), count);
  });
}

template <typename C>
void ShmAllreduce::run(typename C::Data* data, std::size_t count) {
  const std::size_t piece = kShmSlotBytes / sizeof(typename C::Wire);  // elements per round
  const std::uint64_t rounds = (count + piece - 1) / piece;
  auto length = [&](std::uint64_t k) { return std::min(piece, count - k * piece); };
  Store store = stage<C>(rounds_, data, length(0));
  for (std::uint64_t k = 0; k < rounds; ++k) {
    typename C::Data* at = data + k * piece;
    reduce<C>(rounds_ + k, at, length(k), store);
    const Store next = k + 1 < rounds ? stage<C>(rounds_ + k + 1, at + piece, length(k + 1)) : store;
    gather<C>(rounds_ + k, at, length(k));
    store = next;
  }
  rounds_ += rounds;
}

// Returns the store kind it used, which the round's reduce uses too.
template <typename C>
Store ShmAllreduce::stage(std::uint64_t round, const typename C::Data* data, std::size_t n) {
  // Every peer must be done with the round that used this slot last (it reads my slot until then).
  if (round >= kShmSlots) wait_for_peers(kDone, round - kShmSlots + 1);
  const Segments seg(n, size_);
  const std::size_t bytes = (n - seg.length(rank_)) * sizeof(typename C::Wire);
  const bool timed = bytes >= kTimedStageBytes;
  const Store store = timed ? stores_.next() : Store::plain;
  const auto start = std::chrono::steady_clock::now();
  auto* mine = slot<typename C::Wire>(rank_, round);
  for (int q = 0; q < size_; ++q)
    if (q != rank_) encode<C>(mine + seg.begin(q), data + seg.begin(q), seg.length(q), store);
  publish(kStaged, round + 1);  // its fence makes the timing include the streaming stores' drain
  if (timed) stores_.record(store, bytes, std::chrono::steady_clock::now() - start);
  return store;
}

template <typename C>
void ShmAllreduce::reduce(std::uint64_t round, typename C::Data* data, std::size_t n, Store store) {
  wait_for_peers(kStaged, round + 1);
  const Segments seg(n, size_);
  const std::size_t begin = seg.begin(rank_);
  int nsrc = 0;
  for (int q = 0; q < size_; ++q)
    if (q != rank_)
      sources_[static_cast<std::size_t>(nsrc++)] =
          reinterpret_cast<const std::byte*>(slot<typename C::Wire>(q, round) + begin);
  reduce_sources<C>(data + begin, slot<typename C::Wire>(rank_, round) + begin, sources_.data(), nsrc,
                    seg.length(rank_), store);
  publish(kReduced, round + 1);
}

template <typename C>
void ShmAllreduce::gather(std::uint64_t round, typename C::Data* data, std::size_t n) {
  wait_for_peers(kReduced, round + 1);
  const Segments seg(n, size_);
  for (int q = 0; q < size_; ++q)
    if (q != rank_) decode<C>(data + seg.begin(q), slot<typename C::Wire>(q, round) + seg.begin(q), seg.length(q));
  publish(kDone, round + 1);
}

}  // namespace ringtrain::comm
