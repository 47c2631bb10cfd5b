// Private: the reusable batch slots of a loader and the builder thread that fills them ahead of
// the caller: prefetch + 1 slots go from a free queue to the builder and back through a ready
// queue (prefetch 0: slot 0, filled on the caller's thread). Closing both queues wakes everyone.
#pragma once
#include <cstddef>
#include <functional>
#include <optional>
#include <thread>

#include "data/bounded_queue.hpp"

namespace ringtrain::data {

class BatchPrefetcher {
 public:
  // Makes the next batch in slot k; false when there is none (past the last epoch, or stopped).
  using Fill = std::function<bool(std::size_t k)>;

  // A negative prefetch counts as 0 (loaders reject it with their own message).
  explicit BatchPrefetcher(int prefetch);
  // Stops and joins the builder: declare the prefetcher after everything `fill` uses.
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  std::size_t slots() const { return slots_; }

  // With prefetch > 0, starts the builder thread: it runs on_start, then fills free slots.
  void start(Fill fill, const std::function<void()>& on_start = {});

  // Wakes the builder and whoever waits for a batch, for shutdown.
  void stop();

  // The slot holding the next batch, valid until the next call (which hands it back to the
  // builder); nothing once there are no more batches. Rethrows the builder's failure.
  std::optional<std::size_t> next();

 private:
  bool on_caller_thread() const { return slots_ == 1; }  // prefetch 0
  void build_ahead(const std::function<void()>& on_start);

  std::size_t slots_;
  Fill fill_;
  BoundedQueue<std::size_t> ready_, free_;
  std::thread builder_;
  std::optional<std::size_t> held_;  // the slot the caller has
};

}  // namespace ringtrain::data
