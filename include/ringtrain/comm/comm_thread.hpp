// CommThread: runs collectives on a dedicated thread, in submission order, so that gradient
// allreduces (or, sharded, reduce-scatters) proceed while the compute thread goes on with
// backward (the CPU counterpart of a CUDA communication stream); ZeRO stage 3's parameter
// allgathers share the queue, so that every rank runs the same collectives in the same order. Only this thread runs
// collectives on its Communicator between submit and wait_all, so the Communicator needs no
// locking (mark_inputs_ready, which the submitting thread calls, is safe alongside them).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain {

class Communicator;

class CommThread {
 public:
  using Clock = std::chrono::steady_clock;
  // Called on the comm thread after each job with its start and end times.
  using DoneHook = std::function<void(Clock::time_point begin, Clock::time_point end)>;

  explicit CommThread(Communicator& comm);
  ~CommThread();  // finishes queued work, then joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // A job's number in submission order (the first is 1); jobs finish in that order.
  using Ticket = std::uint64_t;

  // Queue the Communicator's collective of that name. ready: the Communicator's
  // mark_inputs_ready() token for the data (0: complete now; allgather takes host data only).
  Ticket allreduce_sum(void* data, std::size_t count, DType dtype, DoneHook done = {}, std::uint64_t ready = 0);
  Ticket reduce_scatter_sum(void* data, std::size_t count, DType dtype, DoneHook done = {}, std::uint64_t ready = 0);
  Ticket allgather(void* data, std::size_t count, DType dtype, DoneHook done = {});
  // Communicator::enqueue_allreduce_sum_after: a device communicator's job finishes once the
  // allreduce is enqueued (its result is there after Communicator::complete()).
  Ticket enqueue_allreduce_sum(void* data, std::size_t count, DType dtype, DoneHook done = {}, std::uint64_t ready = 0);
  // Blocks until every submitted job has finished; rethrows the first error a job raised.
  void wait_all();
  // Blocks until job `ticket` (and so every earlier one) has finished; rethrows the first
  // error a job raised.
  void wait_for(Ticket ticket);

 private:
  enum class Op { allreduce_sum, enqueue_allreduce_sum, reduce_scatter_sum, allgather };
  struct Job {
    Op op;
    void* data;
    std::size_t count;
    DType dtype;
    DoneHook done;
    std::uint64_t ready;
  };
  Ticket submit(Job job);
  void run();

  Communicator& comm_;
  std::mutex mutex_;
  std::condition_variable work_ready_, all_done_;
  std::deque<Job> queue_;
  Ticket submitted_ = 0;  // jobs submitted so far
  Ticket finished_ = 0;   // jobs finished (or dropped) so far
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after everything it uses exists
};

}  // namespace ringtrain
