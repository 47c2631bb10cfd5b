// MpiCommunicator: the CPU backend of Communicator on a private duplicate of the world
// communicator; allreduce, reduce-scatter and allgather either by our ring (through shared
// memory when all ranks share a node, shm_allreduce.cpp, else over MPI messages,
// ring_allreduce.cpp) or by the MPI library (MPI_Allreduce, MPI_Allgatherv).
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/reduce_kernels.hpp"
#include "comm/ring_allreduce.hpp"
#include "comm/shm_allreduce.hpp"
#include "check/mpi_check.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/shard.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "runtime/mpi_context.hpp"

namespace ringtrain {
namespace {

// MPI counts are int: larger calls are cut into pieces of at most this many elements/bytes.
constexpr std::size_t kMaxMpiCount = std::size_t{1} << 30;

// MPI user ops for the halves (MPI has no bf16/f16 type): the same widen-add-round as the
// ring, over MPI_UINT16_T. MPI hands the op distinct in and inout buffers (never aliased).
void bf16_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
  comm::accumulate<comm::Bf16Codec>(static_cast<std::uint16_t*>(inout), static_cast<const std::uint16_t*>(in),
                                    static_cast<std::size_t>(*len));
}

void f16_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
  comm::accumulate<comm::F16Codec>(static_cast<std::uint16_t*>(inout), static_cast<const std::uint16_t*>(in),
                                   static_cast<std::size_t>(*len));
}

// The MPI type that moves elements of `bytes` bytes as their bits.
MPI_Datatype bits_type(std::size_t bytes) {
  switch (bytes) {
    case 1: return MPI_BYTE;
    case 2: return MPI_UINT16_T;
    case 4: return MPI_UINT32_T;
    case 8: return MPI_UINT64_T;
    default: break;
  }
  throw CommError(fmt::format("allgather: no MPI type for {}-byte elements", bytes));
}

// Before anything is built, so that a bad config fails the same way on every rank.
void check_options(const CommOptions& options) {
  RT_REQUIRE(options.wire_dtype == DType::f32 || options.wire_dtype == DType::bf16, ConfigError,
             "comm.wire_dtype: {} not supported (supported: f32, bf16)", dtype_name(options.wire_dtype));
  RT_REQUIRE(options.wire_dtype == DType::f32 || options.algo == AllreduceAlgo::ring, ConfigError,
             "comm.wire_dtype: {} needs comm.allreduce = \"ring\" (MPI_Allreduce sends the data as it is)",
             dtype_name(options.wire_dtype));
}

// Not thread-safe: one call at a time per communicator (the ring's scratch and shared
// staging are members), which is how the trainer's single communication thread uses it.
// The ring's waits sleep through shared memory (shared_counter.hpp) and yield the core over
// MPI messages (yield_wait.hpp); MPI_Allreduce, broadcast and barrier wait
// inside MPI, which spins.
class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm base, const CommOptions& options) : options_(options) {
    check_options(options);
    try {
      // Our own communicator: ring messages can never match a receive posted by other code
      // on the world communicator (data loading, checkpoints), nor the other way round.
      RT_MPI_CHECK(MPI_Comm_dup(base, &comm_));
      RT_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
      RT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
      RT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
      RT_MPI_CHECK(MPI_Op_create(&bf16_sum_op, /*commute=*/1, &bf16_sum_));
      RT_MPI_CHECK(MPI_Op_create(&f16_sum_op, /*commute=*/1, &f16_sum_));
      if (options.algo == AllreduceAlgo::ring && options.shared_memory && size_ > 1)
        shm_ = comm::ShmAllreduce::create(comm_);
      shard_counts_.resize(static_cast<std::size_t>(size_));
      shard_offsets_.resize(static_cast<std::size_t>(size_));
    } catch (...) {
      release();  // the destructor does not run for a half-built object
      throw;
    }
  }

  ~MpiCommunicator() override { release(); }

  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override {
    if (options_.algo == AllreduceAlgo::mpi) return "mpi-allreduce";
    return shm_ ? "mpi-ring-shm" : "mpi-ring";
  }

  void allreduce_sum(void* data, std::size_t count, DType dtype) override { sum(data, count, dtype, false); }

  void reduce_scatter_sum(void* data, std::size_t count, DType dtype) override { sum(data, count, dtype, true); }

  void allgather(void* data, std::size_t count, DType dtype) override {
    if (size_ == 1 || count == 0) return;
    if (options_.algo == AllreduceAlgo::ring) {
      if (shm_)
        shm_->allgather(data, count, dtype);
      else
        comm::ring_allgather(comm_, rank_, size_, data, count, dtype, scratch_);
      return;
    }
    const std::size_t esize = dtype_size(dtype);
    if (count > kMaxMpiCount) {
      // Offsets past the int range: each shard broadcast from its owner, in int-sized pieces.
      for (int q = 0; q < size_; ++q) {
        const ArenaRange shard = shard_range(static_cast<std::int64_t>(count), size_, q);
        broadcast(static_cast<std::byte*>(data) + static_cast<std::size_t>(shard.offset) * esize,
                  static_cast<std::size_t>(shard.count) * esize, q);
      }
      return;
    }
    for (int q = 0; q < size_; ++q) {
      const ArenaRange shard = shard_range(static_cast<std::int64_t>(count), size_, q);
      shard_counts_[static_cast<std::size_t>(q)] = static_cast<int>(shard.count);
      shard_offsets_[static_cast<std::size_t>(q)] = static_cast<int>(shard.offset);
    }
    RT_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, shard_counts_.data(), shard_offsets_.data(),
                                bits_type(esize), comm_));
  }

  void broadcast(void* data, std::size_t bytes, int root) override {
    RT_REQUIRE(root >= 0 && root < size_, CommError, "broadcast: root {} out of range (world size {})", root, size_);
    auto* p = static_cast<std::byte*>(data);
    for (std::size_t done = 0; done < bytes; done += kMaxMpiCount) {
      const std::size_t n = std::min(kMaxMpiCount, bytes - done);
      RT_MPI_CHECK(MPI_Bcast(p + done, static_cast<int>(n), MPI_BYTE, root, comm_));
    }
  }

  void barrier() override { RT_MPI_CHECK(MPI_Barrier(comm_)); }

 private:
  // allreduce_sum, or reduce_scatter_sum (`scatter`: only the own shard need hold the sum). The
  // ring paths run their reduce-scatter phase alone; MPI_Allreduce computes the whole sum, so the
  // own shard is bitwise allreduce_sum's by construction.
  void sum(void* data, std::size_t count, DType dtype, bool scatter) {
    // before any early return: the error must not depend on size
    comm::require_sum_dtype(dtype, scatter ? "reduce_scatter_sum" : "allreduce");
    if (size_ == 1 || count == 0) return;
    if (options_.algo != AllreduceAlgo::ring) return mpi_allreduce_sum(data, count, dtype);
    const DType wire = comm::wire_dtype_for(dtype, options_.wire_dtype);
    if (shm_ && scatter)
      shm_->reduce_scatter_sum(data, count, dtype, wire);
    else if (shm_)
      shm_->allreduce_sum(data, count, dtype, wire);
    else if (scatter)
      comm::ring_reduce_scatter_sum(comm_, rank_, size_, data, count, dtype, wire, scratch_);
    else
      comm::ring_allreduce_sum(comm_, rank_, size_, data, count, dtype, wire, scratch_);
  }

  // MPI_Allreduce in int-sized pieces; bf16/f16 through our user ops.
  void mpi_allreduce_sum(void* data, std::size_t count, DType dtype) {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_Op op = MPI_SUM;
    switch (dtype) {
      case DType::f32: type = MPI_FLOAT; break;
      case DType::f64: type = MPI_DOUBLE; break;
      case DType::i32: type = MPI_INT; break;
      case DType::bf16:
        type = MPI_UINT16_T;
        op = bf16_sum_;
        break;
      case DType::f16:
        type = MPI_UINT16_T;
        op = f16_sum_;
        break;
      case DType::u8: break;  // rejected by the callers
    }
    auto* bytes = static_cast<std::byte*>(data);
    const std::size_t esize = dtype_size(dtype);
    for (std::size_t done = 0; done < count; done += kMaxMpiCount) {
      const std::size_t n = std::min(kMaxMpiCount, count - done);
      RT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bytes + done * esize, static_cast<int>(n), type, op, comm_));
    }
  }

  // Frees what the constructor made. Never throws (destructor path): a failure is logged.
  void release() noexcept {
    try {
      int finalized = 0;
      RT_MPI_CHECK(MPI_Finalized(&finalized));
      if (finalized) return;  // a late destructor: MPI took its handles with it
      if (f16_sum_ != MPI_OP_NULL) RT_MPI_CHECK(MPI_Op_free(&f16_sum_));
      if (bf16_sum_ != MPI_OP_NULL) RT_MPI_CHECK(MPI_Op_free(&bf16_sum_));
      if (comm_ != MPI_COMM_NULL) RT_MPI_CHECK(MPI_Comm_free(&comm_));
    } catch (const std::exception& e) {
      log::warn("communicator: {}", e.what());
    }
  }

  CommOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  MPI_Op f16_sum_ = MPI_OP_NULL;
  int rank_ = 0;
  int size_ = 1;
  comm::ScratchBuffer scratch_;                    // the message ring's slices, reused across calls
  std::vector<int> shard_counts_, shard_offsets_;  // MPI_Allgatherv's, one per rank, reused
  std::unique_ptr<comm::ShmAllreduce> shm_;        // the shared-memory ring, when all ranks share a node
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const Context& ctx, const CommOptions& options) {
  return std::make_unique<MpiCommunicator>(world_comm(ctx), options);
}

std::unique_ptr<Communicator> make_mpi_communicator(const Context& ctx, AllreduceAlgo algo) {
  return make_mpi_communicator(ctx, CommOptions{.algo = algo});
}

std::unique_ptr<Communicator> make_mpi_self_communicator(AllreduceAlgo algo) {
  return std::make_unique<MpiCommunicator>(MPI_COMM_SELF, CommOptions{.algo = algo});
}

}  // namespace ringtrain
