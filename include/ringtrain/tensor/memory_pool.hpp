// MemoryPool: a caching, stream-ordered allocator over a DeviceMemory source (cudaMalloc, or
// host memory for tests). Freed blocks are cached per stream and reused by that stream without
// synchronisation; running out of memory throws OutOfMemory, which callers may catch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace ringtrain {

struct MemoryInfo {
  std::size_t free = 0;
  std::size_t total = 0;
};

// Where a pool's segments come from. allocate returns nullptr when out of memory (never throws
// for that); other failures throw.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
  virtual MemoryInfo info() const = 0;
  virtual std::string name() const = 0;  // for messages: "host", "cuda:0"
};

// Host memory aligned like cudaMalloc (256 bytes), capped at `capacity` bytes in all (default:
// the machine's physical memory), so that tests can run out of memory deterministically.
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

 private:
  mutable std::mutex mutex_;
  std::size_t capacity_;
  std::size_t used_ = 0;
  std::unordered_map<void*, std::size_t> live_;
};

// A stream is named by its handle (a cudaStream_t converts implicitly); nullptr is the default stream.
using StreamHandle = const void*;

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
// that used it, so no synchronisation is needed). A block used on another stream must have
// that work finished before it is freed. Requests take the smallest cached block that fits
// (lowest address on ties) and split off the rest; with none, a new segment of whole 2 MiB
// units comes from the source. Freed blocks merge with free neighbours of their segment.
// When the source is out of memory the pool releases its wholly free segments and retries
// once, then throws OutOfMemory. Thread-safe.
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
  void empty_cache();                                                // returns the wholly free segments to the source
  PoolStats stats() const;
  // Restarts peak_in_use from the current in_use, so that it measures what comes next (one
  // candidate batch size of `tune batch`).
  void reset_peak();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ringtrain
