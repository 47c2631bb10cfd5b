// MemoryPool: a caching, stream-ordered allocator over a DeviceMemory source (cudaMalloc, or
// host memory for tests). Freed blocks are cached per stream and reused by that stream without
// synchronisation; running out of memory throws OutOfMemory, which callers may catch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace ringtrain {

struct MemoryInfo {
  std::size_t free = 0;
  std::size_t total = 0;
};

// A stream is named by its handle (a cudaStream_t converts implicitly); nullptr is the default stream.
using StreamHandle = const void*;
// A marker of the work queued on a stream up to some point (a cudaEvent_t).
using StreamEvent = void*;

// Where a pool's segments come from. allocate returns nullptr when out of memory (never throws
// for that); other failures throw. The events tell the pool when a stream's work has passed a
// point: record_event marks the work queued on `stream` so far; event_done says whether it has
// finished (without waiting); wait_event waits until it has; destroy_event lets the marker go.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
  virtual MemoryInfo info() const = 0;
  virtual std::string name() const = 0;  // for messages: "host", "cuda:0"
  virtual StreamEvent record_event(StreamHandle stream) = 0;
  virtual bool event_done(StreamEvent event) = 0;
  virtual void wait_event(StreamEvent event) = 0;
  virtual void destroy_event(StreamEvent event) = 0;
};

// Host memory aligned like cudaMalloc (256 bytes), capped at `capacity` bytes in all (default:
// the machine's physical memory), so that tests can run out of memory deterministically. Host
// work is done when it returns, so its events are done when recorded; a test plays a stream that
// is still busy with hold_events(): events recorded from then on stay pending until
// finish_events() or until waited for (the wait is where a busy stream's work would finish).
class HostMemory final : public DeviceMemory {
 public:
  static constexpr std::size_t kAlignment = 256;
  HostMemory();
  explicit HostMemory(std::size_t capacity);
  ~HostMemory() override;  // frees what is still outstanding
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;

  void* allocate(std::size_t bytes) override;
  void release(void* ptr) override;
  MemoryInfo info() const override;  // free = capacity - outstanding bytes
  std::string name() const override { return "host"; }
  std::size_t outstanding() const;  // allocations not yet released
  StreamEvent record_event(StreamHandle stream) override;
  bool event_done(StreamEvent event) override;
  void wait_event(StreamEvent event) override;
  void destroy_event(StreamEvent event) override;
  void hold_events();
  void finish_events();
  std::size_t live_events() const;  // recorded and not yet destroyed

 private:
  mutable std::mutex mutex_;
  std::size_t capacity_;
  std::size_t used_ = 0;
  std::unordered_map<void*, std::size_t> live_;
  bool holding_ = false;
  std::list<bool> events_;  // the live events, each done or not; an event is its element's address
  std::list<bool>::iterator live_event(StreamEvent event);  // mutex_ held
};

struct PoolStats {
  std::size_t in_use = 0;         // bytes handed out (requests rounded up to kBlockGranularity)
  std::size_t peak_in_use = 0;    // the most in_use has been
  std::size_t reserved = 0;       // bytes held from the source; reserved - in_use is cached
  std::size_t segments = 0;       // allocations held from the source
  std::uint64_t allocations = 0;  // successful allocate calls
  std::uint64_t cache_hits = 0;   // of which served from cached blocks, without a new segment
};

// Requests are rounded up to 512 bytes. Each stream has its own free list: a block freed on
// stream S is reused only by S (work queued on S after the free is ordered after the work
// that used it, so no synchronisation is needed). A block also used on another stream is
// declared with record_stream: when it is freed, an event is recorded on each such stream and
// the block is reused only once they are all done (checked without waiting at each allocate;
// waited for before the pool gives up with OutOfMemory). Until then it counts as in use. Requests take the smallest
// cached block that fits (lowest address on ties) and split off the rest; with none, a new segment of whole 2 MiB units
// comes from the source. Freed blocks merge with free neighbours of their segment. When the source is out of memory the
// pool releases its wholly free segments and retries once, then throws OutOfMemory. Thread-safe.
class MemoryPool {
 public:
  static constexpr std::size_t kBlockGranularity = 512;
  static constexpr std::size_t kSegmentGranularity = std::size_t{2} << 20;

  explicit MemoryPool(DeviceMemory& source);  // the source outlives the pool
  // Returns every segment to the source, blocks still handed out included.
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  void* allocate(std::size_t bytes, StreamHandle stream = nullptr);  // 0 bytes: nullptr
  void free(void* ptr);                                              // nullptr: nothing
  // Declares that the block at `ptr` (handed out, not yet freed) is used on `stream` too, besides
  // the stream it was allocated for; once per stream is enough.
  void record_stream(void* ptr, StreamHandle stream);
  void empty_cache();  // returns the wholly free segments to the source
  PoolStats stats() const;
  // Restarts peak_in_use from the current in_use, so that it measures what comes next (one
  // candidate batch size of `tune batch`).
  void reset_peak();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ringtrain
