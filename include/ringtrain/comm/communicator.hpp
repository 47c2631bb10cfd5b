// Communicator: the collectives data-parallel training needs, behind one small interface so
// that the MPI backend (CPU) and the NCCL backend (GPU) are chosen at run time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain {

class Context;

// How allreduce is carried out by the MPI backend.
enum class AllreduceAlgo {
  ring,  // our own ring: reduce-scatter then allgather over point-to-point messages
  mpi,   // the MPI library's MPI_Allreduce
};

std::string_view allreduce_algo_name(AllreduceAlgo algo);

// Parses the wire dtype "f32" / "bf16"; throws ConfigError naming `key` and the value otherwise.
DType parse_wire_dtype(std::string_view value, std::string_view key = "comm.wire_dtype");

// How the MPI backend is built.
struct CommOptions {
  AllreduceAlgo algo = AllreduceAlgo::ring;
  // What f32 data travels as: f32, or bf16 for half the bytes (sums are still formed in f32
  // and every rank still ends bitwise identical; the result carries bf16 precision). Other
  // dtypes always travel as themselves. bf16 needs the ring (ConfigError with algo mpi).
  DType wire_dtype = DType::f32;
  // Ring only: when all ranks share one node, reduce through shared memory (one copy per
  // byte) rather than MPI messages. Off forces the message ring (tests, benchmarks).
  bool shared_memory = true;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view name() const = 0;  // e.g. "mpi-ring", "mpi-ring-shm"
  // Whether collectives take device (GPU) pointers (NCCL, or MPI staged through host memory)
  // rather than host pointers (MPI).
  virtual bool device_memory() const { return false; }
  // Whether collectives call MPI (then running them on a communication thread next to the
  // caller's own MPI calls needs MPI_THREAD_MULTIPLE). NCCL does not.
  virtual bool calls_mpi() const { return !device_memory(); }
  // Bytes the communicator holds to stage its buffers (MPI staged through pinned host memory).
  virtual std::size_t staging_bytes() const { return 0; }

  // In-place elementwise sum over all ranks of `count` elements of `dtype` at `data`
  // (f32, f64, bf16, f16, i32). Every rank ends with bitwise identical results. count may
  // be 0. bf16/f16 are summed in f32 and rounded once per reduction step.
  virtual void allreduce_sum(void* data, std::size_t count, DType dtype) = 0;
  // Device communicators (NCCL): notes how far the device work queued so far reaches and
  // returns a token for that point (never 0). Called on the thread that queues the work, even
  // while another thread runs this communicator's collectives. A collective given the token
  // (allreduce_sum_after) waits for that work only, not for work queued after it: a gradient
  // bucket need not wait for the backward of the layers before it. Host communicators return
  // 0: their data is complete when the call is made.
  virtual std::uint64_t mark_inputs_ready() { return 0; }
  // allreduce_sum of inputs complete at `ready`, a mark_inputs_ready() token (0: now).
  virtual void allreduce_sum_after(std::uint64_t ready, void* data, std::size_t count, DType dtype) {
    (void)ready;
    allreduce_sum(data, count, dtype);
  }
  // allreduce_sum_after that a device communicator whose collectives run on a stream of its own
  // (NCCL) only enqueues: the call returns once the collective is queued, so that the next one
  // queues right behind it with no host wait between them; the data is reduced after
  // complete(). Host communicators reduce here (the default).
  virtual void enqueue_allreduce_sum_after(std::uint64_t ready, void* data, std::size_t count, DType dtype) {
    allreduce_sum_after(ready, data, count, dtype);
  }
  // Waits once for every collective enqueued since the last call (with the communicator's
  // timeout; a failure aborts it and throws CommError) and returns the seconds they ran on the
  // device; 0 when none was (host communicators).
  virtual double complete() { return 0.0; }
  // Orders the device work queued after this call (the compute stream) after every collective
  // enqueued so far, without a host wait; complete() is still due (it waits, times and checks
  // them). Nothing to do for host communicators.
  virtual void join_on_device() {}
  // ZeRO-style sharding: the two halves of allreduce_sum on the shard layout of
  // ringtrain/comm/shard.hpp. The defaults throw CommError naming the communicator (the same
  // error on every rank, without communicating) for backends that do not have them yet.
  //
  // In-place sum over all ranks of `count` elements of `dtype` at `data`, of which each rank
  // keeps only its shard (shard_range(count, size(), rank())): there the values are bitwise
  // those allreduce_sum would give (same wire dtype, same summation order; NCCL, which picks
  // its own order per collective, agrees to rounding only); the rest of data is left
  // unspecified. count may be 0. Dtypes: those of allreduce_sum.
  virtual void reduce_scatter_sum(void* data, std::size_t count, DType dtype);
  // In place: each rank's shard of data (shard_range) is copied to every rank, bit for bit (the
  // data travels as itself whatever comm.wire_dtype says: parameters must not be rounded). Any
  // dtype; count may be 0.
  virtual void allgather(void* data, std::size_t count, DType dtype);
  // reduce_scatter_sum of inputs complete at `ready`, as allreduce_sum_after.
  virtual void reduce_scatter_sum_after(std::uint64_t ready, void* data, std::size_t count, DType dtype) {
    (void)ready;
    reduce_scatter_sum(data, count, dtype);
  }
  // Copies `bytes` bytes at `data` from `root` to all ranks.
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  virtual void barrier() = 0;
};

// The MPI backend on the Context's world communicator. Collective. Throws ConfigError for
// options that do not go together.
std::unique_ptr<Communicator> make_mpi_communicator(const Context& ctx, const CommOptions& options);
// The same with default options but `algo`.
std::unique_ptr<Communicator> make_mpi_communicator(const Context& ctx, AllreduceAlgo algo);
// A one-rank communicator on this process alone (MPI_COMM_SELF): the single-process
// reference that data-parallel results are compared with.
std::unique_ptr<Communicator> make_mpi_self_communicator(AllreduceAlgo algo);

}  // namespace ringtrain
