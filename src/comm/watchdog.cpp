// Watchdog and the watching Communicator decorator (see header). The monitor thread sleeps
// on a condition variable and checks the oldest in-flight operation a few times per timeout.
#include "ringtrain/comm/watchdog.hpp"

#include <algorithm>
#include <string>
#include <string_view>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {

Watchdog::Watchdog(double timeout_s, std::function<void(const std::string&)> on_timeout)
    : timeout_s_(timeout_s), on_timeout_(std::move(on_timeout)) {
  RT_REQUIRE(timeout_s > 0.0, ConfigError, "comm.timeout_s: must be > 0, got {}", timeout_s);
  thread_ = std::thread([this] { monitor(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::uint64_t Watchdog::begin(std::string description) {
  return begin(std::move(description), Budget{timeout_s_, "comm.timeout_s"});
}

std::uint64_t Watchdog::begin(std::string description, Budget budget) {
  std::lock_guard lock(mutex_);
  const std::uint64_t id = next_id_++;
  in_flight_.emplace(id, InFlight{std::move(description), Clock::now(), std::move(budget)});
  return id;
}

void Watchdog::done(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  in_flight_.erase(id);
}

void Watchdog::monitor() {
  const auto period = std::chrono::duration<double>(std::clamp(timeout_s_ / 4.0, 0.05, 5.0));
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, period, [this] { return stopping_; })) {
    const auto now = Clock::now();
    for (const auto& [id, op] : in_flight_) {
      const double waited = std::chrono::duration<double>(now - op.start).count();
      if (waited < op.budget.seconds) continue;
      const std::string message = fmt::format(
          "{} did not finish within {} = {:g} s (waited {:.0f} s): a peer rank is stuck, dead or not calling the same "
          "collective{}",
          op.description, op.budget.key, op.budget.seconds, waited,
          op.budget.key == "comm.timeout_s" ? "" : ", or the file system stopped answering");
      lock.unlock();
      on_timeout_(message);
      return;
    }
  }
}

namespace {

class WatchedCommunicator : public Communicator {
 public:
  WatchedCommunicator(std::unique_ptr<Communicator> inner, Watchdog& watchdog, std::string label)
      : inner_(std::move(inner)), watchdog_(watchdog), label_(std::move(label)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string_view name() const override { return inner_->name(); }
  bool device_memory() const override { return inner_->device_memory(); }
  bool calls_mpi() const override { return inner_->calls_mpi(); }
  std::size_t staging_bytes() const override { return inner_->staging_bytes(); }

  void allreduce_sum(void* data, std::size_t count, DType dtype) override {
    watched(describe("allreduce", count, dtype), [&] { inner_->allreduce_sum(data, count, dtype); });
  }
  std::uint64_t mark_inputs_ready() override { return inner_->mark_inputs_ready(); }
  void allreduce_sum_after(std::uint64_t ready, void* data, std::size_t count, DType dtype) override {
    watched(describe("allreduce", count, dtype), [&] { inner_->allreduce_sum_after(ready, data, count, dtype); });
  }
  void enqueue_allreduce_sum_after(std::uint64_t ready, void* data, std::size_t count, DType dtype) override {
    watched(describe("enqueued allreduce", count, dtype),
            [&] { inner_->enqueue_allreduce_sum_after(ready, data, count, dtype); });
  }
  double complete() override {
    double seconds = 0.0;
    watched("completion of the enqueued collectives", [&] { seconds = inner_->complete(); });
    return seconds;
  }
  void join_on_device() override {
    watched("ordering the device after the enqueued collectives", [&] { inner_->join_on_device(); });
  }
  void reduce_scatter_sum(void* data, std::size_t count, DType dtype) override {
    watched(describe("reduce-scatter", count, dtype), [&] { inner_->reduce_scatter_sum(data, count, dtype); });
  }
  void reduce_scatter_sum_after(std::uint64_t ready, void* data, std::size_t count, DType dtype) override {
    watched(describe("reduce-scatter", count, dtype),
            [&] { inner_->reduce_scatter_sum_after(ready, data, count, dtype); });
  }
  void allgather(void* data, std::size_t count, DType dtype) override {
    watched(describe("allgather", count, dtype), [&] { inner_->allgather(data, count, dtype); });
  }
  void broadcast(void* data, std::size_t bytes, int root) override {
    watched(fmt::format("broadcast of {} bytes from rank {}", bytes, root),
            [&] { inner_->broadcast(data, bytes, root); });
  }
  void barrier() override {
    watched("barrier", [&] { inner_->barrier(); });
  }

 private:
  static std::string describe(std::string_view op, std::size_t count, DType dtype) {
    return fmt::format("{} of {} {} elements ({} bytes)", op, count, dtype_name(dtype), count * dtype_size(dtype));
  }
  template <typename F>
  void watched(const std::string& what, F&& call) {
    const std::uint64_t seq = ++seq_;
    const WatchedScope watch(
        watchdog_, fmt::format("{} collective #{} ({}, {} on {} ranks)", label_, seq, what, inner_->name(), size()));
    call();
  }

  std::unique_ptr<Communicator> inner_;
  Watchdog& watchdog_;
  std::string label_;
  std::uint64_t seq_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> watch_collectives(std::unique_ptr<Communicator> inner, Watchdog& watchdog,
                                                std::string label) {
  return std::make_unique<WatchedCommunicator>(std::move(inner), watchdog, std::move(label));
}

}  // namespace ringtrain
