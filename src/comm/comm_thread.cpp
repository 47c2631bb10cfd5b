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
    finished_ += queue_.size();
    queue_.clear();
  }
  work_ready_.notify_all();
  thread_.join();
}

CommThread::Ticket CommThread::allreduce_sum(void* data, std::size_t count, DType dtype, DoneHook done,
                                             std::uint64_t ready) {
  return submit(Job{Op::allreduce_sum, data, count, dtype, std::move(done), ready});
}

CommThread::Ticket CommThread::enqueue_allreduce_sum(void* data, std::size_t count, DType dtype, DoneHook done,
                                                     std::uint64_t ready) {
  return submit(Job{Op::enqueue_allreduce_sum, data, count, dtype, std::move(done), ready});
}

CommThread::Ticket CommThread::reduce_scatter_sum(void* data, std::size_t count, DType dtype, DoneHook done,
                                                  std::uint64_t ready) {
  return submit(Job{Op::reduce_scatter_sum, data, count, dtype, std::move(done), ready});
}

CommThread::Ticket CommThread::allgather(void* data, std::size_t count, DType dtype, DoneHook done) {
  return submit(Job{Op::allgather, data, count, dtype, std::move(done), 0});
}

CommThread::Ticket CommThread::submit(Job job) {
  Ticket ticket = 0;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(job));
    ticket = ++submitted_;
  }
  work_ready_.notify_one();
  return ticket;
}

void CommThread::wait_all() {
  Ticket last = 0;
  {
    std::lock_guard lock(mutex_);
    last = submitted_;
  }
  wait_for(last);
}

void CommThread::wait_for(Ticket ticket) {
  std::unique_lock lock(mutex_);
  all_done_.wait(lock, [this, ticket] { return finished_ >= ticket; });
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
          case Op::enqueue_allreduce_sum:
            comm_.enqueue_allreduce_sum_after(job.ready, job.data, job.count, job.dtype);
            break;
          case Op::reduce_scatter_sum: comm_.reduce_scatter_sum_after(job.ready, job.data, job.count, job.dtype); break;
          case Op::allgather: comm_.allgather(job.data, job.count, job.dtype); break;
        }
        if (job.done) job.done(begin, Clock::now());
      } catch (...) {
        std::lock_guard error_lock(mutex_);
        error_ = std::current_exception();
      }
    }
    lock.lock();
    ++finished_;
    all_done_.notify_all();  // wait_for waits for other tickets than the last too
  }
}

}  // namespace ringtrain
