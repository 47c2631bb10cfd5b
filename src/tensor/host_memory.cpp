// HostMemory: aligned host allocations under a byte cap, counted so that tests can check for
// leaks and run out of memory at a chosen size.
#include <unistd.h>

#include <algorithm>
#include <new>

#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/memory_pool.hpp"

namespace ringtrain {
namespace {

std::size_t physical_memory_bytes() {
  return static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

constexpr std::align_val_t kAlign{HostMemory::kAlignment};

}  // namespace

HostMemory::HostMemory() : HostMemory(physical_memory_bytes()) {}

HostMemory::HostMemory(std::size_t capacity) : capacity_(capacity) {}

HostMemory::~HostMemory() {
  for (const auto& [ptr, bytes] : live_) ::operator delete(ptr, kAlign);
}

void* HostMemory::allocate(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (bytes > capacity_ - used_) return nullptr;
  void* ptr = ::operator new(bytes, kAlign, std::nothrow);
  if (ptr == nullptr) return nullptr;
  live_.emplace(ptr, bytes);
  used_ += bytes;
  return ptr;
}

void HostMemory::release(void* ptr) {
  std::lock_guard lock(mutex_);
  const auto it = live_.find(ptr);
  RT_REQUIRE(it != live_.end(), Error, "HostMemory::release: {} was not allocated here or is already released", ptr);
  used_ -= it->second;
  live_.erase(it);
  ::operator delete(ptr, kAlign);
}

MemoryInfo HostMemory::info() const {
  std::lock_guard lock(mutex_);
  return {capacity_ - used_, capacity_};
}

std::size_t HostMemory::outstanding() const {
  std::lock_guard lock(mutex_);
  return live_.size();
}

StreamEvent HostMemory::record_event(StreamHandle) {
  std::lock_guard lock(mutex_);
  events_.push_back(!holding_);
  return &events_.back();
}

bool HostMemory::event_done(StreamEvent event) {
  std::lock_guard lock(mutex_);
  return *live_event(event);
}

void HostMemory::wait_event(StreamEvent event) {
  std::lock_guard lock(mutex_);
  *live_event(event) = true;
}

void HostMemory::destroy_event(StreamEvent event) {
  std::lock_guard lock(mutex_);
  events_.erase(live_event(event));
}

void HostMemory::hold_events() {
  std::lock_guard lock(mutex_);
  holding_ = true;
}

void HostMemory::finish_events() {
  std::lock_guard lock(mutex_);
  holding_ = false;
  for (bool& done : events_) done = true;
}

std::size_t HostMemory::live_events() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}

std::list<bool>::iterator HostMemory::live_event(StreamEvent event) {
  const auto it = std::find_if(events_.begin(), events_.end(), [event](bool& done) { return &done == event; });
  RT_REQUIRE(it != events_.end(), Error, "HostMemory: event {} was not recorded here or is already destroyed", event);
  return it;
}

}  // namespace ringtrain
