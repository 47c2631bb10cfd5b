// MemoryPool: segments from a DeviceMemory cut into blocks. Every block is indexed by address;
// free blocks also sit in their stream's free list ordered by (size, address), so best fit is
// one lower_bound. A segment's blocks are linked in address order, which is what merging needs.
// A freed block used on other streams waits in `pending` with one event per such stream.
#include "ringtrain/tensor/memory_pool.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <set>
#include <vector>

#include "ringtrain/core/bytes.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"

namespace ringtrain {
namespace {

struct Block {
  char* ptr = nullptr;
  std::size_t size = 0;
  StreamHandle stream = nullptr;
  bool in_use = false;    // handed out, or freed and pending
  Block* prev = nullptr;  // neighbours in the same segment; a segment's first block has no prev
  Block* next = nullptr;
  bool pending = false;                    // freed, waiting for the other streams it was used on
  std::vector<StreamHandle> used_on = {};  // record_stream's streams besides `stream`, while handed out
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

struct PendingBlock {
  Block* block;
  std::vector<StreamEvent> events;  // one per stream the block was used on besides its own
};

}  // namespace

struct MemoryPool::State {
  explicit State(DeviceMemory& s) : source(s) {}

  DeviceMemory& source;
  mutable std::mutex mutex;
  std::unordered_map<const char*, std::unique_ptr<Block>> blocks;  // every block, by address
  std::unordered_map<StreamHandle, FreeList> free_lists;
  std::vector<PendingBlock> pending;
  PoolStats stats;

  // The handed-out block at `ptr`; an Error naming `call` for anything else.
  Block* handed_out(void* ptr, const char* call) {
    const auto it = blocks.find(static_cast<const char*>(ptr));
    RT_REQUIRE(it != blocks.end() && it->second->in_use && !it->second->pending, Error,
               "MemoryPool::{}: {} was not allocated by this pool or is already free", call, ptr);
    return it->second.get();
  }

  // Puts a freed block back on its stream's free list, merged with free neighbours.
  void release_block(Block* block) {
    block->in_use = false;
    stats.in_use -= block->size;
    FreeList& list = free_lists[block->stream];
    if (Block* prev = block->prev; prev != nullptr && !prev->in_use) {
      list.erase(prev);
      absorb(prev, block);
      block = prev;
    }
    if (Block* next = block->next; next != nullptr && !next->in_use) {
      list.erase(next);
      absorb(block, next);
    }
    list.insert(block);
  }

  // Releases the pending blocks whose other streams are done; with `wait`, waits for them all.
  void retire_pending(bool wait) {
    for (auto it = pending.begin(); it != pending.end();) {
      const bool done = wait || std::all_of(it->events.begin(), it->events.end(),
                                            [this](StreamEvent e) { return source.event_done(e); });
      if (!done) {
        ++it;
        continue;
      }
      for (StreamEvent e : it->events) {
        if (wait) source.wait_event(e);
        source.destroy_event(e);
      }
      it->block->pending = false;
      release_block(it->block);
      it = pending.erase(it);
    }
  }

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
  for (const PendingBlock& p : state_->pending) {
    for (StreamEvent e : p.events) {
      try {
        state_->source.destroy_event(e);
      } catch (const std::exception& ex) {
        log::warn("memory pool: destroying a stream event at exit failed: {}", ex.what());
      }
    }
  }
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

  state_->retire_pending(false);
  Block* block = state_->take_cached(size, stream);
  bool cached = block != nullptr;
  if (block == nullptr) block = state_->new_segment(size, stream);
  if (block == nullptr && !state_->pending.empty()) {
    // Out of memory: the blocks other streams still use come back once those are done.
    state_->retire_pending(true);
    block = state_->take_cached(size, stream);
    cached = block != nullptr;
  }
  if (block == nullptr) {  // then the wholly free segments go back to the source, for one more try
    state_->release_free_segments();
    block = state_->new_segment(size, stream);
  }
  if (block == nullptr) state_->throw_out_of_memory(bytes);
  if (cached) ++state_->stats.cache_hits;
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
  Block* block = state_->handed_out(ptr, "free");
  if (block->used_on.empty()) return state_->release_block(block);
  PendingBlock pending{block, {}};
  try {
    for (StreamHandle s : block->used_on) pending.events.push_back(state_->source.record_event(s));
  } catch (...) {  // the block stays handed out: leaked, never reused too early
    for (StreamEvent e : pending.events) state_->source.destroy_event(e);
    throw;
  }
  block->used_on.clear();
  block->pending = true;
  state_->pending.push_back(std::move(pending));
}

void MemoryPool::record_stream(void* ptr, StreamHandle stream) {
  std::lock_guard lock(state_->mutex);
  Block* block = state_->handed_out(ptr, "record_stream");
  if (stream == block->stream ||
      std::find(block->used_on.begin(), block->used_on.end(), stream) != block->used_on.end())
    return;
  block->used_on.push_back(stream);
}

void MemoryPool::empty_cache() {
  std::lock_guard lock(state_->mutex);
  state_->retire_pending(false);
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
