// MemoryPool: segments from a DeviceMemory cut into blocks. Every block is indexed by address;
// free blocks also sit in their stream's free list ordered by (size, address), so best fit is
// one lower_bound. A segment's blocks are linked in address order, which is what merging needs.
#include "ringtrain/tensor/memory_pool.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <set>

#include "ringtrain/core/bytes.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"

namespace ringtrain {
namespace {

struct Block {
  char* ptr = nullptr;
  std::size_t size = 0;
  StreamHandle stream = nullptr;
  bool in_use = false;
  Block* prev = nullptr;  // neighbours in the same segment; a segment's first block has no prev
  Block* next = nullptr;
};

struct BySizeThenAddress {
  bool operator()(const Block* a, const Block* b) const {
    if (a->size != b->size) return a->size < b->size;
    return std::less<const char*>{}(a->ptr, b->ptr);
  }
};
using FreeList = std::set<Block*, BySizeThenAddress>;

std::size_t round_up(std::size_t n, std::size_t unit) { return (n + unit - 1) / unit * unit; }

// An out-of-memory message's sizes: readable, with the exact count where it is over 1 KiB.
std::string with_exact_bytes(std::size_t bytes) {
  const std::string readable = format_bytes(static_cast<double>(bytes));
  return bytes < 1024 ? readable : fmt::format("{} ({} bytes)", readable, bytes);
}

bool is_whole_segment(const Block* b) { return b->prev == nullptr && b->next == nullptr; }

}  // namespace

struct MemoryPool::State {
  explicit State(DeviceMemory& s) : source(s) {}

  DeviceMemory& source;
  mutable std::mutex mutex;
  std::unordered_map<const char*, std::unique_ptr<Block>> blocks;  // every block, by address
  std::unordered_map<StreamHandle, FreeList> free_lists;
  PoolStats stats;

  // The smallest cached block of `stream` with at least `size` bytes, taken off its free list.
  Block* take_cached(std::size_t size, StreamHandle stream) {
    const auto list = free_lists.find(stream);
    if (list == free_lists.end()) return nullptr;
    Block probe{nullptr, size};
    const auto it = list->second.lower_bound(&probe);
    if (it == list->second.end()) return nullptr;
    Block* block = *it;
    list->second.erase(it);
    return block;
  }

  // A new segment of whole kSegmentGranularity units, or nullptr when the source is out of memory.
  Block* new_segment(std::size_t size, StreamHandle stream) {
    const std::size_t bytes = round_up(size, kSegmentGranularity);
    auto* ptr = static_cast<char*>(source.allocate(bytes));
    if (ptr == nullptr) return nullptr;
    stats.reserved += bytes;
    ++stats.segments;
    auto block = std::make_unique<Block>(Block{ptr, bytes, stream});
    return (blocks[ptr] = std::move(block)).get();
  }

  // Cuts `block` to `size` bytes; the rest becomes a free block right after it.
  void split(Block* block, std::size_t size) {
    if (block->size == size) return;
    auto rest =
        std::make_unique<Block>(Block{block->ptr + size, block->size - size, block->stream, false, block, block->next});
    if (block->next != nullptr) block->next->prev = rest.get();
    block->next = rest.get();
    block->size = size;
    free_lists[block->stream].insert(rest.get());
    blocks[rest->ptr] = std::move(rest);
  }

  // Folds `right`, a free block just after `left` that is off its free list, into `left`.
  void absorb(Block* left, Block* right) {
    left->size += right->size;
    left->next = right->next;
    if (right->next != nullptr) right->next->prev = left;
    blocks.erase(right->ptr);
  }

  void release_free_segments() {
    for (auto list = free_lists.begin(); list != free_lists.end();) {
      for (auto it = list->second.begin(); it != list->second.end();) {
        Block* block = *it;
        if (!is_whole_segment(block)) {
          ++it;
          continue;
        }
        source.release(block->ptr);
        stats.reserved -= block->size;
        --stats.segments;
        it = list->second.erase(it);
        blocks.erase(block->ptr);
      }
      list = list->second.empty() ? free_lists.erase(list) : std::next(list);
    }
  }

  [[noreturn]] void throw_out_of_memory(std::size_t bytes) const {
    const MemoryInfo device = source.info();
    throw OutOfMemory(
        fmt::format("out of memory on {}: requested {}; this pool holds {} in use, {} reserved; the device has "
                    "{} free of {} total; lower train.batch_size",
                    source.name(), with_exact_bytes(bytes), with_exact_bytes(stats.in_use),
                    with_exact_bytes(stats.reserved), with_exact_bytes(device.free), with_exact_bytes(device.total)));
  }
};

MemoryPool::MemoryPool(DeviceMemory& source) : state_(std::make_unique<State>(source)) {}

MemoryPool::~MemoryPool() {
  for (const auto& [ptr, block] : state_->blocks) {
    if (block->prev != nullptr) continue;  // not the start of a segment
    try {
      state_->source.release(block->ptr);
    } catch (const std::exception& e) {
      log::warn("memory pool: releasing a segment at exit failed: {}", e.what());
    }
  }
}

void* MemoryPool::allocate(std::size_t bytes, StreamHandle stream) {
  if (bytes == 0) return nullptr;
  std::lock_guard lock(state_->mutex);
  // Beyond any device, and rounding it up could overflow.
  if (bytes > std::numeric_limits<std::size_t>::max() / 2) state_->throw_out_of_memory(bytes);
  const std::size_t size = round_up(bytes, kBlockGranularity);

  Block* block = state_->take_cached(size, stream);
  if (block != nullptr) {
    ++state_->stats.cache_hits;
  } else {
    block = state_->new_segment(size, stream);
    if (block == nullptr) {
      state_->release_free_segments();
      block = state_->new_segment(size, stream);
    }
    if (block == nullptr) state_->throw_out_of_memory(bytes);
  }
  state_->split(block, size);
  block->in_use = true;

  PoolStats& s = state_->stats;
  s.in_use += size;
  s.peak_in_use = std::max(s.peak_in_use, s.in_use);
  ++s.allocations;
  return block->ptr;
}

void MemoryPool::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard lock(state_->mutex);
  const auto it = state_->blocks.find(static_cast<const char*>(ptr));
  RT_REQUIRE(it != state_->blocks.end() && it->second->in_use, Error,
             "MemoryPool::free: {} was not allocated by this pool or is already free", ptr);
  Block* block = it->second.get();
  block->in_use = false;
  state_->stats.in_use -= block->size;

  FreeList& list = state_->free_lists[block->stream];
  if (Block* prev = block->prev; prev != nullptr && !prev->in_use) {
    list.erase(prev);
    state_->absorb(prev, block);
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && !next->in_use) {
    list.erase(next);
    state_->absorb(block, next);
  }
  list.insert(block);
}

void MemoryPool::empty_cache() {
  std::lock_guard lock(state_->mutex);
  state_->release_free_segments();
}

PoolStats MemoryPool::stats() const {
  std::lock_guard lock(state_->mutex);
  return state_->stats;
}

void MemoryPool::reset_peak() {
  std::lock_guard lock(state_->mutex);
  state_->stats.peak_in_use = state_->stats.in_use;
}

}  // namespace ringtrain
