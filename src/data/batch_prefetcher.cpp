// BatchPrefetcher (see header). The builder ends by closing the ready queue, with its failure
// when it failed, so that next() drains the batches made before and then rethrows.
#include "data/batch_prefetcher.hpp"

#include <algorithm>
#include <exception>
#include <utility>

namespace ringtrain::data {

BatchPrefetcher::BatchPrefetcher(int prefetch)
    : slots_(static_cast<std::size_t>(std::max(prefetch, 0)) + 1), ready_(slots_), free_(slots_) {}

BatchPrefetcher::~BatchPrefetcher() {
  stop();
  if (builder_.joinable()) builder_.join();
}

void BatchPrefetcher::start(Fill fill, const std::function<void()>& on_start) {
  fill_ = std::move(fill);
  if (on_caller_thread()) return;
  for (std::size_t k = 0; k < slots_; ++k) free_.push(k);
  builder_ = std::thread([this, on_start] { build_ahead(on_start); });
}

void BatchPrefetcher::stop() {
  free_.close();
  ready_.close();
}

std::optional<std::size_t> BatchPrefetcher::next() {
  if (on_caller_thread()) return fill_(0) ? std::optional<std::size_t>(0) : std::nullopt;
  if (held_) free_.push(*held_);
  const std::optional<std::size_t> slot = ready_.pop();
  if (slot) held_ = slot;
  return slot;
}

void BatchPrefetcher::build_ahead(const std::function<void()>& on_start) {
  if (on_start) on_start();
  try {
    while (std::optional<std::size_t> slot = free_.pop()) {
      if (!fill_(*slot)) break;
      if (!ready_.push(*slot)) return;
    }
    ready_.close();
  } catch (...) {
    ready_.close(std::current_exception());
  }
}

}  // namespace ringtrain::data
