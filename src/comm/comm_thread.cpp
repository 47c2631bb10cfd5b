// CommThread (see header). After a failed job the remaining jobs are dropped: the error is
// rethrown by wait_all on the compute thread, which ends the run on every rank. Destruction
// drops the jobs not yet started too: it only finds any when the compute thread is unwinding
// from an error, and starting collectives then would only delay this rank's abort until the
// peers' watchdog fires.
#include "ringtrain/comm/comm_thread.hpp"

#include <utility>

#include "ringtrain/comm/communicator.hpp"

namespace ringtrain {

CommThread::CommThread(Communicator& comm) : comm_(comm), thread_([this] { run(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    in_flight_ -= queue_.size();
    queue_.clear();
  }
  work_ready_.notify_all();
  thread_.join();
}

void CommThread::allreduce_sum(void* data, std::size_t count, DType dtype, DoneHook done, std::uint64_t ready) {
  submit(Job{Op::allreduce_sum, data, count, dtype, std::move(done), ready});
}

void CommThread::reduce_scatter_sum(void* data, std::size_t count, DType dtype, DoneHook done, std::uint64_t ready) {
  submit(Job{Op::reduce_scatter_sum, data, count, dtype, std::move(done), ready});
}

void CommThread::submit(Job job) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(job));
    ++in_flight_;
  }
  work_ready_.notify_one();
}

void CommThread::wait_all() { wait_until_pending(0); }

void CommThread::wait_until_pending(std::size_t pending) {
  std::unique_lock lock(mutex_);
  all_done_.wait(lock, [this, pending] { return in_flight_ <= pending; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void CommThread::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to do
    Job job = std::move(queue_.front());
    queue_.pop_front();
    const bool skip = error_ != nullptr;
    lock.unlock();
    if (!skip) {
      try {
        const auto begin = Clock::now();
        switch (job.op) {
          case Op::allreduce_sum: comm_.allreduce_sum_after(job.ready, job.data, job.count, job.dtype); break;
          case Op::reduce_scatter_sum: comm_.reduce_scatter_sum_after(job.ready, job.data, job.count, job.dtype); break;
        }
        if (job.done) job.done(begin, Clock::now());
      } catch (...) {
        std::lock_guard error_lock(mutex_);
        error_ = std::current_exception();
      }
    }
    lock.lock();
    --in_flight_;
    all_done_.notify_all();  // wait_until_pending waits for counts other than 0 too
  }
}

}  // namespace ringtrain
