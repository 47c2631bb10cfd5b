// CommThread: runs collectives on a dedicated thread, in submission order, so that gradient
// allreduces (or, sharded, reduce-scatters) proceed while the compute thread goes on with
// backward (the CPU counterpart of a CUDA communication stream). Only this thread runs
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

  // Queue the Communicator's collective of that name. ready: the Communicator's
  // mark_inputs_ready() token for the data (0: complete now).
  void allreduce_sum(void* data, std::size_t count, DType dtype, DoneHook done = {}, std::uint64_t ready = 0);
  void reduce_scatter_sum(void* data, std::size_t count, DType dtype, DoneHook done = {}, std::uint64_t ready = 0);
  // Blocks until every submitted job has finished; rethrows the first error a job raised.
  void wait_all();
  // Blocks until at most `pending` submitted jobs are unfinished (jobs finish in submission
  // order, so every earlier one is done); rethrows the first error a job raised.
  void wait_until_pending(std::size_t pending);

 private:
  enum class Op { allreduce_sum, reduce_scatter_sum };
  struct Job {
    Op op;
    void* data;
    std::size_t count;
    DType dtype;
    DoneHook done;
    std::uint64_t ready;
  };
  void submit(Job job);
  void run();

  Communicator& comm_;
  std::mutex mutex_;
  std::condition_variable work_ready_, all_done_;
  std::deque<Job> queue_;
  std::size_t in_flight_ = 0;  // queued + running
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after everything it uses exists
};

}  // namespace ringtrain
