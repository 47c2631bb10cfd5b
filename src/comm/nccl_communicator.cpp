// NcclCommunicator: the GPU backend of Communicator. One NCCL communicator per rank over the
// world (its id made by rank 0 and broadcast over MPI), collectives on a private stream and
// waited for by polling, so that a dead or failed peer ends in an abort and a CommError. The
// gradient buckets' allreduces are only enqueued (enqueue_allreduce_sum_after), each after its
// own inputs, back to back on the stream; complete() then polls once for all of them and sums
// their device time from events recorded around each. ZeRO's reduce-scatter and allgather run
// in place on the shard layout (ringtrain/comm/shard.hpp); a buffer that is not size x the
// shard unit long goes through a padded device staging buffer on the stream.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <array>
#include <cstddef>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "check/nccl_check.hpp"
#include "comm/nccl_unique_id.hpp"
#include "check/cuda_check.hpp"
#include "check/mpi_check.hpp"
#include "cuda/compute_stream.hpp"
#include "cuda/gpu_backend.hpp"
#include "ringtrain/comm/nccl.hpp"
#include "ringtrain/comm/shard.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"
#include "runtime/mpi_context.hpp"

namespace ringtrain {

static_assert(sizeof(ncclUniqueId) == comm::kNcclUniqueIdBytes, "NCCL_UNIQUE_ID_BYTES changed");
// Non-blocking communicators, ncclCommFinalize and ncclGetLastError arrived in 2.14.
static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0), "ringtrain needs NCCL 2.14 or newer");

namespace {

using Clock = std::chrono::steady_clock;

// A small allreduce takes tens of microseconds, so polls first only yield (a sleep would
// dominate it); after that they sleep briefly so a long wait leaves the core to the loader.
constexpr auto kSpinFor = std::chrono::microseconds(200);
constexpr auto kPollSleep = std::chrono::microseconds(50);

class Deadline {
 public:
  explicit Deadline(double seconds)
      : start_(Clock::now()),
        end_(start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))) {}
  bool passed() const { return Clock::now() >= end_; }
  void pause() const {
    if (Clock::now() - start_ < kSpinFor)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(kPollSleep);
  }

 private:
  Clock::time_point start_;
  Clock::time_point end_;
};

std::optional<ncclDataType_t> nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::u8: return std::nullopt;  // a sum of bytes would wrap silently
  }
  return std::nullopt;
}

// Not thread-safe: one collective at a time (the trainer's single communication thread); only
// mark_inputs_ready() may be called from another thread meanwhile.
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const Context& ctx, const NcclOptions& options)
      : options_(options), rank_(ctx.world_rank()), size_(ctx.world_size()) {
    try {
      // Everything local that can fail is agreed on before any rank enters NCCL init, where
      // it would otherwise wait for a peer that has already given up.
      run_collectively(ctx, [&] { with_rank([&] { prepare(ctx); }); });
      const comm::NcclUniqueIdBytes id_bytes = comm::exchange_nccl_unique_id(ctx);
      ncclUniqueId id;
      std::memcpy(&id, id_bytes.data(), sizeof(id));
      // Agreed on too: a rank whose init failed must not leave peers holding a communicator
      // whose first collective would wait for it.
      run_collectively(ctx, [&] { with_rank([&] { init(id); }); });
    } catch (...) {
      release();  // the destructor does not run for a half-built object
      throw;
    }
  }

  ~NcclCommunicator() override { release(); }

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "nccl"; }
  bool device_memory() const override { return true; }

  void allreduce_sum(void* data, std::size_t count, DType dtype) override {
    allreduce_sum_after(0, data, count, dtype);
  }

  std::uint64_t mark_inputs_ready() override {
    check::bind_thread_to_device(device_);  // collectives may come from the communication thread
    const std::uint64_t token = next_mark_.fetch_add(1) + 1;
    // An event on the legacy stream covers the work queued there and on every blocking stream
    // (the compute stream). When the ring wraps before a mark is waited for, the wait covers a
    // later point of the same work: later, never wrong.
    RT_CUDA_CHECK(cudaEventRecord(marks_[token % kMarks], cudaStreamLegacy));
    return token;
  }

  void allreduce_sum_after(std::uint64_t ready, void* data, std::size_t count, DType dtype) override {
    const auto type = allreduce_type("allreduce", data, count, dtype);
    if (!type) return;
    run("allreduce", count, dtype_name(dtype), ready,
        [&] { return ncclAllReduce(data, data, count, *type, ncclSum, comm_, stream_); });
  }

  void enqueue_allreduce_sum_after(std::uint64_t ready, void* data, std::size_t count, DType dtype) override {
    const auto type = allreduce_type("allreduce", data, count, dtype);
    if (!type) return;
    const Timing& timing = next_timing();
    guarded(fmt::format("nccl allreduce of {} x {}", count, dtype_name(dtype)), [&] {
      enqueue_after(ready, &timing, [&] { return ncclAllReduce(data, data, count, *type, ncclSum, comm_, stream_); });
    });
  }

  // NCCL sums a reduce-scatter in its own order, which need not be its allreduce's: the shards
  // agree with allreduce_sum to rounding, not bitwise (the host ring's promise).
  void reduce_scatter_sum(void* data, std::size_t count, DType dtype) override {
    reduce_scatter_sum_after(0, data, count, dtype);
  }

  void reduce_scatter_sum_after(std::uint64_t ready, void* data, std::size_t count, DType dtype) override {
    const auto type = allreduce_type("reduce-scatter", data, count, dtype);
    if (!type) return;
    run_sharded("reduce-scatter", ready, data, count, dtype, /*gather=*/false,
                [&](std::byte* buffer, std::size_t unit) {
                  return ncclReduceScatter(buffer, buffer + rank_ * unit * dtype_size(dtype), unit, *type, ncclSum,
                                           comm_, stream_);
                });
  }

  void allgather(void* data, std::size_t count, DType dtype) override {
    require_usable("allgather");
    if (count == 0) return;
    require_device_pointer("allgather", data);
    run_sharded("allgather", 0, data, count, dtype, /*gather=*/true, [&](std::byte* buffer, std::size_t unit) {
      const std::size_t unit_bytes = unit * dtype_size(dtype);  // the bits travel as bytes: any dtype, never rounded
      return ncclAllGather(buffer + rank_ * unit_bytes, buffer, unit_bytes, ncclUint8, comm_, stream_);
    });
  }

  std::size_t staging_bytes() const override { return staging_capacity_; }

  void join_on_device() override {
    if (timed_ == 0) return;
    guarded("ordering the compute stream after the enqueued nccl collectives", [&] {
      check::bind_thread_to_device(device_);
      RT_CUDA_CHECK(cudaEventRecord(joined_, stream_));
      RT_CUDA_CHECK(cudaStreamWaitEvent(cuda::compute_stream(), joined_, 0));
    });
  }

  double complete() override {
    if (timed_ == 0) return 0.0;
    guarded(fmt::format("completion of {} enqueued nccl collectives", timed_), [&] {
      check::bind_thread_to_device(device_);
      wait();
    });
    double seconds = 0.0;
    for (std::size_t i = 0; i < timed_; ++i) {
      float ms = 0.0f;
      RT_CUDA_CHECK(cudaEventElapsedTime(&ms, timings_[i].start, timings_[i].end));
      seconds += static_cast<double>(ms) / 1e3;
    }
    timed_ = 0;
    return seconds;
  }

  void broadcast(void* data, std::size_t bytes, int root) override {
    RT_REQUIRE(root >= 0 && root < size_, CommError, "broadcast: root {} out of range (world size {})", root, size_);
    require_usable("broadcast");
    if (bytes == 0) return;
    require_device_pointer("broadcast", data);
    run("broadcast", bytes, "bytes", 0,
        [&] { return ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_); });
  }

  // An NCCL allreduce of one int rather than MPI_Barrier: after construction this backend
  // depends on NCCL alone, a broken peer shows up here as the same abort and CommError as in
  // any collective (instead of an MPI hang), and it stays right if the NCCL communicator
  // ever covers other ranks than MPI's world.
  void barrier() override {
    require_usable("barrier");
    run("barrier", 1, "i32", 0,
        [&] { return ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_, stream_); });
  }

 private:
  // Prefixes the rank to a failure, since run_collectively shows one rank's message to all.
  template <typename F>
  void with_rank(F&& step) {
    try {
      step();
    } catch (const std::exception& e) {
      throw CommError(fmt::format("nccl: rank {} of {}: {}", rank_, size_, e.what()));
    }
  }

  void prepare(const Context& ctx) {
    RT_REQUIRE(std::isfinite(options_.timeout_s) && options_.timeout_s > 0, ConfigError,
               "nccl timeout_s must be a positive number of seconds (got {})", options_.timeout_s);
    const DeviceBinding& binding = ctx.binding();
    if (binding.backend == Device::cuda && binding.device >= 0) {
      device_ = binding.device;
    } else {
      const int count = gpu("comm.backend=nccl").device_count();
      RT_REQUIRE(count > 0, CommError,
                 "no CUDA device visible on this node (node-local rank {}); the nccl backend needs one GPU per rank",
                 ctx.local_rank());
      device_ = ctx.local_rank() % count;
    }
    RT_CUDA_CHECK(cudaSetDevice(device_));
    // Non-blocking: collectives must not serialize with the legacy default stream that other
    // code may use; inputs are ordered explicitly through inputs_ready_ instead.
    RT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    RT_CUDA_CHECK(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming));
    RT_CUDA_CHECK(cudaEventCreateWithFlags(&joined_, cudaEventDisableTiming));
    for (cudaEvent_t& mark : marks_) RT_CUDA_CHECK(cudaEventCreateWithFlags(&mark, cudaEventDisableTiming));
    RT_CUDA_CHECK(cudaMalloc(&barrier_word_, sizeof(int)));
    RT_CUDA_CHECK(cudaMemset(barrier_word_, 0, sizeof(int)));
  }

  void init(const ncclUniqueId& id) {
    RT_CUDA_CHECK(cudaSetDevice(device_));  // NCCL binds the communicator to the current device
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = options_.nonblocking ? 0 : 1;
    const ncclResult_t rc = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      if (comm_ != nullptr) abort_comm();
      check::nccl(rc, "ncclCommInitRankConfig", __FILE__, __LINE__);
    }
    const Deadline deadline(options_.timeout_s);
    for (;;) {
      ncclResult_t state = ncclSuccess;
      RT_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
      if (state == ncclSuccess) break;
      if (state != ncclInProgress) {
        const std::string why = check::describe_nccl_error(state);
        abort_comm();
        throw CommError(fmt::format("ncclCommInitRankConfig on device {} failed: {}", device_, why));
      }
      if (deadline.passed()) {
        abort_comm();
        throw CommError(
            fmt::format("ncclCommInitRankConfig on device {} not done after {} s (timeout_s): a peer "
                        "did not join; aborted",
                        device_, options_.timeout_s));
      }
      deadline.pause();
    }
  }

  // The NCCL type of an allreduce's dtype (checked before any early return: the error must not
  // depend on the size); nullopt when there is nothing to do (count 0).
  std::optional<ncclDataType_t> allreduce_type(const char* op, const void* data, std::size_t count, DType dtype) {
    const auto type = nccl_type(dtype);
    RT_REQUIRE(type.has_value(), CommError, "{}: dtype {} not supported (supported: f32, f64, bf16, f16, i32)", op,
               dtype_name(dtype));
    require_usable(op);
    if (count == 0) return std::nullopt;
    require_device_pointer(op, data);
    return type;
  }

  // Enqueues one collective after its inputs and waits for it (and for everything enqueued before).
  template <typename Enqueue>
  void run(const char* op, std::size_t count, std::string_view unit, std::uint64_t ready, Enqueue&& enqueue) {
    guarded(fmt::format("nccl {} of {} x {}", op, count, unit), [&] {
      enqueue_after(ready, nullptr, enqueue);
      wait();
    });
  }

  // A reduce-scatter or allgather of `count` elements at `data` on the shard layout, run and
  // waited for: `collective(buffer, unit)` enqueues it in place on a buffer of size x unit
  // elements, rank r's part at r x unit. That is `data` itself when it is exactly that long; else
  // the padded staging buffer, filled on the stream first (a reduce-scatter: all of data and zeros
  // after it; an allgather: this rank's shard) and read back after (this rank's reduced shard;
  // the gathered count elements).
  template <typename Collective>
  void run_sharded(const char* op, std::uint64_t ready, void* data, std::size_t count, DType dtype, bool gather,
                   Collective&& collective) {
    const std::size_t es = dtype_size(dtype);
    const auto unit = static_cast<std::size_t>(shard_unit(static_cast<std::int64_t>(count), size_));
    const std::size_t padded = unit * static_cast<std::size_t>(size_);
    const ArenaRange own = shard_range(static_cast<std::int64_t>(count), size_, rank_);
    const std::size_t own_at = static_cast<std::size_t>(own.offset) * es;
    const std::size_t own_bytes = static_cast<std::size_t>(own.count) * es;
    auto* in_place = static_cast<std::byte*>(data);
    guarded(fmt::format("nccl {} of {} x {}", op, count, dtype_name(dtype)), [&] {
      check::bind_thread_to_device(device_);
      wait_for_inputs(ready);
      if (padded == count) {
        enqueue_group([&] { return collective(in_place, unit); });
      } else {
        std::byte* staged = staging(padded * es);
        if (gather) {
          if (own_bytes > 0)
            RT_CUDA_CHECK(
                cudaMemcpyAsync(staged + own_at, in_place + own_at, own_bytes, cudaMemcpyDeviceToDevice, stream_));
        } else {
          RT_CUDA_CHECK(cudaMemcpyAsync(staged, in_place, count * es, cudaMemcpyDeviceToDevice, stream_));
          RT_CUDA_CHECK(cudaMemsetAsync(staged + count * es, 0, (padded - count) * es, stream_));
        }
        enqueue_group([&] { return collective(staged, unit); });
        if (gather) {
          RT_CUDA_CHECK(cudaMemcpyAsync(in_place, staged, count * es, cudaMemcpyDeviceToDevice, stream_));
        } else if (own_bytes > 0) {
          RT_CUDA_CHECK(
              cudaMemcpyAsync(in_place + own_at, staged + own_at, own_bytes, cudaMemcpyDeviceToDevice, stream_));
        }
      }
      wait();
    });
  }

  // The padded staging buffer of run_sharded, at least `bytes` long (grown when needed: the
  // collectives before have completed, each run_sharded waits for its own).
  std::byte* staging(std::size_t bytes) {
    if (bytes > staging_capacity_) {
      if (staging_ != nullptr) RT_CUDA_CHECK(cudaFree(staging_));
      staging_ = nullptr;
      staging_capacity_ = 0;
      RT_CUDA_CHECK(cudaMalloc(&staging_, bytes));
      staging_capacity_ = bytes;
    }
    return static_cast<std::byte*>(staging_);
  }

  // Runs `step`; on any failure (or the timeout) the NCCL communicator is aborted (peers stuck in
  // the same collective then fail or time out too) and the error names `what` and the cause.
  template <typename Step>
  void guarded(const std::string& what, Step&& step) {
    try {
      step();
    } catch (const std::exception& e) {
      if (comm_ != nullptr) abort_comm();
      broken_ = fmt::format("{} failed", what);
      throw CommError(fmt::format("{} failed on rank {} (device {}): {}; the NCCL communicator was aborted", what,
                                  rank_, device_, e.what()));
    }
  }

  // Events recorded around one enqueued collective on the stream, for its device time.
  struct Timing {
    cudaEvent_t start = nullptr, end = nullptr;
  };

  // The events for the next enqueued collective (created once, reused after each complete()).
  const Timing& next_timing() {
    check::bind_thread_to_device(device_);
    if (timed_ == timings_.size()) {
      Timing t;
      RT_CUDA_CHECK(cudaEventCreate(&t.start));
      const cudaError_t rc = cudaEventCreate(&t.end);
      if (rc != cudaSuccess) (void)cudaEventDestroy(t.start);
      check::cuda(rc, "cudaEventCreate(&t.end)", __FILE__, __LINE__);
      timings_.push_back(t);
    }
    return timings_[timed_++];
  }

  // Enqueues one collective on the stream after its inputs (the mark `ready`, or 0: all work
  // queued so far), between the events of `timing` when given, and returns once NCCL has it
  // (a non-blocking communicator may still be enqueuing when the call returns, and no other
  // NCCL call may come before it has).
  template <typename Enqueue>
  void enqueue_after(std::uint64_t ready, const Timing* timing, Enqueue&& enqueue) {
    check::bind_thread_to_device(device_);  // collectives may come from the communication thread
    wait_for_inputs(ready);
    if (timing != nullptr) RT_CUDA_CHECK(cudaEventRecord(timing->start, stream_));
    enqueue_group(enqueue);
    if (timing != nullptr) RT_CUDA_CHECK(cudaEventRecord(timing->end, stream_));
  }

  // Orders the stream after the inputs: the mark `ready`, or 0: all work queued so far. Inputs
  // written by work on the legacy default stream (or a blocking stream) must be complete before
  // NCCL reads them; an event on the legacy stream covers both.
  void wait_for_inputs(std::uint64_t ready) {
    if (ready == 0) RT_CUDA_CHECK(cudaEventRecord(inputs_ready_, cudaStreamLegacy));
    RT_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready == 0 ? inputs_ready_ : marks_[ready % kMarks], 0));
  }

  // Enqueues one collective as an NCCL group on the stream; returns once NCCL has it.
  template <typename Enqueue>
  void enqueue_group(Enqueue&& enqueue) {
    RT_NCCL_CHECK_ASYNC(ncclGroupStart());
    const ncclResult_t enqueued = enqueue();
    const ncclResult_t ended = ncclGroupEnd();  // always closes the group, even after a failed enqueue
    if (enqueued != ncclSuccess && enqueued != ncclInProgress)
      throw CommError(fmt::format("enqueue failed: {}", check::describe_nccl_error(enqueued)));
    if (ended != ncclSuccess && ended != ncclInProgress)
      throw CommError(fmt::format("ncclGroupEnd failed: {}", check::describe_nccl_error(ended)));
    if (ended == ncclInProgress) wait_until_enqueued();
  }

  // Until NCCL reports no pending state (the enqueue of a non-blocking communicator finished).
  void wait_until_enqueued() {
    const Deadline deadline(options_.timeout_s);
    for (;;) {
      ncclResult_t state = ncclSuccess;
      RT_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
      if (state == ncclSuccess) return;
      if (state != ncclInProgress)
        throw CommError(fmt::format("asynchronous NCCL error: {}", check::describe_nccl_error(state)));
      if (deadline.passed()) throw CommError(fmt::format("not enqueued after {} s (timeout_s)", options_.timeout_s));
      deadline.pause();
    }
  }

  // Done when NCCL reports no pending state (non-blocking enqueue may still be in progress,
  // and until it is the stream may look idle) and the stream has drained.
  void wait() {
    const Deadline deadline(options_.timeout_s);
    for (;;) {
      ncclResult_t state = ncclSuccess;
      RT_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
      if (state != ncclSuccess && state != ncclInProgress)
        throw CommError(fmt::format("asynchronous NCCL error: {}", check::describe_nccl_error(state)));
      if (state == ncclSuccess) {
        const cudaError_t query = cudaStreamQuery(stream_);
        if (query == cudaSuccess) return;
        if (query != cudaErrorNotReady) check::cuda(query, "cudaStreamQuery(stream_)", __FILE__, __LINE__);
      }
      if (deadline.passed())
        throw CommError(fmt::format("not done after {} s (timeout_s): a peer is stuck, dead or not calling it",
                                    options_.timeout_s));
      deadline.pause();
    }
  }

  void require_usable(const char* op) const {
    RT_REQUIRE(broken_.empty(), CommError, "nccl {}: the communicator is unusable, aborted after: {}", op, broken_);
  }

  // NCCL given a host pointer fails deep inside a kernel (or reads garbage); say so here.
  void require_device_pointer(const char* op, const void* data) const {
    cudaPointerAttributes attributes{};
    RT_CUDA_CHECK(cudaPointerGetAttributes(&attributes, data));
    const bool on_device = attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
    RT_REQUIRE(on_device, CommError,
               "nccl {}: {} is not device memory (the nccl backend takes device pointers; "
               "use the mpi backend for host buffers)",
               op, data);
    RT_REQUIRE(attributes.type == cudaMemoryTypeManaged || attributes.device == device_, CommError,
               "nccl {}: buffer {} is on device {}, this rank's communicator on device {}", op, data, attributes.device,
               device_);
  }

  void abort_comm() noexcept {
    const ncclResult_t rc = ncclCommAbort(comm_);
    if (rc != ncclSuccess) log::warn("nccl: ncclCommAbort failed: {}", ncclGetErrorString(rc));
    comm_ = nullptr;
  }

  // Frees what the constructor made. Never throws (destructor path): failures are logged. A
  // healthy communicator is finalized (flushes NCCL's pending work, bounded by timeout_s)
  // before destroy; a failed finalize or a broken one is aborted instead.
  void release() noexcept {
    try {
      try {
        if (device_ >= 0) check::bind_thread_to_device(device_);
      } catch (const std::exception& e) {
        log::warn("nccl communicator: {}", e.what());  // still free what we can
      }
      if (comm_ != nullptr) {
        bool finalized = false;
        const ncclResult_t rc = ncclCommFinalize(comm_);
        if (rc == ncclSuccess || rc == ncclInProgress) {
          const Deadline deadline(options_.timeout_s);
          ncclResult_t state = ncclInProgress;
          while (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress && !deadline.passed())
            deadline.pause();
          finalized = state == ncclSuccess;
          if (!finalized) log::warn("nccl: finalize failed or timed out ({}); aborting", ncclGetErrorString(state));
        } else {
          log::warn("nccl: ncclCommFinalize failed: {}; aborting", check::describe_nccl_error(rc));
        }
        if (finalized) {
          const ncclResult_t destroyed = ncclCommDestroy(comm_);
          if (destroyed != ncclSuccess) log::warn("nccl: ncclCommDestroy failed: {}", ncclGetErrorString(destroyed));
          comm_ = nullptr;
        } else {
          abort_comm();
        }
      }
      if (barrier_word_ != nullptr) (void)cudaFree(barrier_word_);
      if (staging_ != nullptr) (void)cudaFree(staging_);
      staging_ = nullptr;
      staging_capacity_ = 0;
      if (inputs_ready_ != nullptr) (void)cudaEventDestroy(inputs_ready_);
      if (joined_ != nullptr) (void)cudaEventDestroy(joined_);
      for (cudaEvent_t& mark : marks_) {
        if (mark != nullptr) (void)cudaEventDestroy(mark);
        mark = nullptr;
      }
      for (const Timing& t : timings_) {
        (void)cudaEventDestroy(t.start);
        (void)cudaEventDestroy(t.end);
      }
      timings_.clear();
      if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
      barrier_word_ = nullptr;
      inputs_ready_ = nullptr;
      joined_ = nullptr;
      stream_ = nullptr;
    } catch (const std::exception& e) {
      log::warn("nccl communicator: {}", e.what());
    }
  }

  NcclOptions options_;
  int rank_ = 0;
  int size_ = 1;
  int device_ = -1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t inputs_ready_ = nullptr;
  cudaEvent_t joined_ = nullptr;             // join_on_device: the end of the enqueued collectives
  static constexpr std::size_t kMarks = 64;  // mark_inputs_ready() tokens in flight (a ring)
  std::array<cudaEvent_t, kMarks> marks_{};
  std::atomic<std::uint64_t> next_mark_{0};
  std::vector<Timing> timings_;  // per collective enqueued since the last complete(), the first timed_
  std::size_t timed_ = 0;
  int* barrier_word_ = nullptr;  // device scratch for barrier()
  void* staging_ = nullptr;      // run_sharded's padded buffer, staging_capacity_ bytes
  std::size_t staging_capacity_ = 0;
  std::string broken_;  // why the communicator was aborted; empty while usable
};

}  // namespace

comm::NcclUniqueIdBytes comm::exchange_nccl_unique_id(const Context& ctx) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  // Collective, so that a failure on rank 0 ends every rank instead of leaving them in the
  // broadcast below.
  run_collectively(ctx, [&] {
    if (ctx.world_rank() == 0) RT_NCCL_CHECK(ncclGetUniqueId(&id));
  });
  RT_MPI_CHECK(MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, world_comm(ctx)));
  comm::NcclUniqueIdBytes bytes;
  std::memcpy(bytes.data(), &id, sizeof(id));
  return bytes;
}

std::unique_ptr<Communicator> make_nccl_communicator(const Context& ctx, const NcclOptions& options) {
  return std::make_unique<NcclCommunicator>(ctx, options);
}

bool nccl_compiled() { return true; }

std::string nccl_version() {
  int code = 0;
  RT_NCCL_CHECK(ncclGetVersion(&code));
  // NCCL_VERSION(X, Y, Z) is X*10000 + Y*100 + Z since 2.9, X*1000 + Y*100 + Z before.
  if (code >= 10000) return fmt::format("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100);
  return fmt::format("{}.{}.{}", code / 1000, code % 1000 / 100, code % 100);
}

}  // namespace ringtrain
