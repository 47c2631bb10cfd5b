// ShmAllreduce: allreduce, reduce-scatter and allgather among ranks that all share one node,
// through a fixed-size POSIX shared-memory staging area. Each rank stages the parts of its
// data other ranks reduce, reduces its own part reading its peers' staged copies in place,
// then copies the others' results out of their staging: one copy per byte each way, where
// MPI's transport makes two. Every element is summed in rank order, whichever rank sums it.
#pragma once
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/reduce_kernels.hpp"
#include "comm/shared_counter.hpp"
#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain::comm {

// Staging per rank and round, in bytes of wire data: a call moves its data through in rounds
// of this size. 1 MiB keeps a round's staging (slot x ranks) in cache, so that a peer reads
// what a rank staged from there, and makes the three flag waits per round noise (256 KiB to
// 2 MiB measured within noise of each other on 2 ranks).
inline constexpr std::size_t kShmSlotBytes = std::size_t{1} << 20;
// Slots per rank: two let a rank stage round t+1 while its peers still read round t.
inline constexpr int kShmSlots = 2;

// How a rank writes its staging slots. Plain stores leave the lines in its cache, where a peer
// on a nearby core reads them fastest. Streaming stores send them to memory, which wins when
// the peers' cores are far (another socket or die, or a VM's vCPUs on distant host cores):
// there each plain store to a line a peer has read waits for a cross-die invalidation, and the
// peer reads from this cache at cross-die latency. On our VMs, whose vCPUs move between near
// and far host cores while a job runs, 2 ranks at 1 MiB measured 4 GB/s plain against 8-11
// streamed when far, 10-16 plain against 8 streamed when near. So each rank times its stage
// phase with both kinds and streams while plain stores are clearly slower, timing the other
// kind again now and then. Only stores differ: results never depend on the choice.
class StoreChoice {
 public:
  // The kind for the next timed stage phase.
  Store next() const;
  void record(Store store, std::size_t bytes, std::chrono::steady_clock::duration time);

 private:
  double ns_per_byte_[2] = {};  // running estimate per kind; 0 until measured
  std::uint64_t measured_ = 0;  // timed stage phases so far
};

class ShmRounds;  // how a call's data is cut into rounds (shm_allreduce.cpp)

class ShmAllreduce {
 public:
  // Collective over `comm`. Null, on every rank alike, when the ranks of `comm` do not all
  // share one node or the shared memory cannot be set up (then a warning names the call that
  // failed); the caller keeps the MPI ring then.
  static std::unique_ptr<ShmAllreduce> create(MPI_Comm comm);
  // Only unmaps: local, never waits for peers (on an error path they may be gone already).
  ~ShmAllreduce();
  ShmAllreduce(const ShmAllreduce&) = delete;
  ShmAllreduce& operator=(const ShmAllreduce&) = delete;

  // The contract of ring_allreduce_sum (collective, same count/dtype/wire on every rank,
  // bitwise identical results). Safe to call repeatedly with any sizes; a wait polls
  // briefly, then sleeps (shared_counter.hpp).
  void allreduce_sum(void* data, std::size_t count, DType dtype, DType wire);
  // The contracts of ring_reduce_scatter_sum and ring_allgather: this rank's shard
  // (shard_range) bitwise as allreduce_sum leaves it, resp. every shard copied to all ranks.
  void reduce_scatter_sum(void* data, std::size_t count, DType dtype, DType wire);
  void allgather(void* data, std::size_t count, DType dtype);

 private:
  enum Counter { kStaged, kReduced, kDone };
  // What a call does in each round: allreduce stages the peers' pieces, reduces its own and
  // gathers the peers' results; reduce_scatter stops after reducing; allgather stages its own
  // piece and gathers the peers' ones.
  enum class Op { allreduce, reduce_scatter, allgather };

  ShmAllreduce(int rank, int size, std::byte* base, std::size_t mapped);
  template <typename C>
  void run(Op op, typename C::Data* data, const ShmRounds& rounds);
  template <typename C>
  Store stage(std::uint64_t round, const typename C::Data* data, const ShmRounds& rounds, std::uint64_t k, bool own);
  template <typename C>
  void reduce(std::uint64_t round, typename C::Data* data, const ShmRounds& rounds, std::uint64_t k, Store store);
  template <typename C>
  void gather(std::uint64_t round, typename C::Data* data, const ShmRounds& rounds, std::uint64_t k, Counter ready);

  std::byte* part(int rank) const;
  template <typename Wire>
  Wire* slot(int rank, std::uint64_t round) const;
  SharedCounter& counter(int rank, Counter c) const;
  void publish(Counter c, std::uint64_t value) const;
  void wait_for_peers(Counter c, std::uint64_t value) const;

  int rank_;
  int size_;
  std::byte* base_;                        // all ranks' parts, rank order
  std::size_t mapped_;                     // bytes mapped at base_
  std::uint64_t rounds_ = 0;               // rounds this communicator has run: the same on every rank
  std::vector<const std::byte*> sources_;  // peers' staged copies of this rank's segment
  StoreChoice stores_;
};

}  // namespace ringtrain::comm
