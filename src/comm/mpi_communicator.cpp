// MpiCommunicator: the CPU backend of Communicator on a private duplicate of the world
// communicator; allreduce either by our ring (through shared memory when all ranks share a
// node, shm_allreduce.cpp, else over MPI messages, ring_allreduce.cpp) or by MPI_Allreduce.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>

#include "comm/reduce_kernels.hpp"
#include "comm/ring_allreduce.hpp"
#include "comm/shm_allreduce.hpp"
#include "check/mpi_check.hpp"
#include "ringtrain/comm/communicator.hpp"
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
// The ring's waits yield the core (yield_wait.hpp); MPI_Allreduce, broadcast and barrier wait
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

  void allreduce_sum(void* data, std::size_t count, DType dtype) override {
    comm::require_sum_dtype(dtype);  // before any early return: the error must not depend on size
    if (size_ == 1 || count == 0) return;
    if (options_.algo == AllreduceAlgo::ring) {
      const DType wire = comm::wire_dtype_for(dtype, options_.wire_dtype);
      if (shm_)
        shm_->allreduce_sum(data, count, dtype, wire);
      else
        comm::ring_allreduce_sum(comm_, rank_, size_, data, count, dtype, wire, scratch_);
      return;
    }
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
      case DType::u8: break;  // rejected above
    }
    auto* bytes = static_cast<std::byte*>(data);
    const std::size_t esize = dtype_size(dtype);
    for (std::size_t done = 0; done < count; done += kMaxMpiCount) {
      const std::size_t n = std::min(kMaxMpiCount, count - done);
      RT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bytes + done * esize, static_cast<int>(n), type, op, comm_));
    }
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
  comm::ScratchBuffer scratch_;              // the message ring's slices, reused across calls
  std::unique_ptr<comm::ShmAllreduce> shm_;  // the shared-memory ring, when all ranks share a node
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
