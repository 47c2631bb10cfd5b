// MemoryPool over HostMemory: reuse, per-stream caches, best fit, splitting and merging, exact
// statistics and their peak reset, out of memory (retry after emptying the cache, then
// OutOfMemory), blocks used on other streams (reused only after their events), threads, leaks.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/tensor/memory_pool.hpp"

namespace ringtrain {
namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;

char* as_bytes(void* p) { return static_cast<char*>(p); }

TEST(MemoryPool, ReusesAFreedBlockWithoutANewSegment) {
  HostMemory memory;
  MemoryPool pool(memory);
  void* first = pool.allocate(1000);
  pool.free(first);
  void* second = pool.allocate(900);
  EXPECT_EQ(second, first);
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.in_use, 1024u);
  EXPECT_EQ(memory.outstanding(), 1u);
  pool.free(second);
}

TEST(MemoryPool, EachStreamHasItsOwnCache) {
  HostMemory memory;
  MemoryPool pool(memory);
  int stream_a = 0, stream_b = 0;
  void* on_a = pool.allocate(4 * kKiB, &stream_a);
  pool.free(on_a);
  void* on_b = pool.allocate(4 * kKiB, &stream_b);  // a's cached block is not b's to take
  EXPECT_NE(on_b, on_a);
  EXPECT_EQ(pool.stats().segments, 2u);
  EXPECT_EQ(pool.stats().cache_hits, 0u);
  EXPECT_EQ(pool.allocate(4 * kKiB, &stream_a), on_a);
  EXPECT_EQ(pool.stats().cache_hits, 1u);
  void* on_default = pool.allocate(4 * kKiB);  // the default stream is a stream of its own
  EXPECT_EQ(pool.stats().segments, 3u);
  pool.free(on_default);
  pool.free(on_a);
  pool.free(on_b);
}

TEST(MemoryPool, SplitsASegmentAndMergesFreedNeighbours) {
  HostMemory memory;
  MemoryPool pool(memory);
  void* a = pool.allocate(1 * kMiB);
  void* b = pool.allocate(512 * kKiB);
  void* c = pool.allocate(512 * kKiB);
  EXPECT_EQ(as_bytes(b), as_bytes(a) + 1 * kMiB);
  EXPECT_EQ(as_bytes(c), as_bytes(b) + 512 * kKiB);
  EXPECT_EQ(pool.stats().segments, 1u);
  EXPECT_EQ(pool.stats().in_use, pool.stats().reserved);

  pool.free(a);
  pool.free(b);  // merges with a: one 1.5 MiB block
  void* merged = pool.allocate(1 * kMiB + 512 * kKiB);
  EXPECT_EQ(merged, a);
  EXPECT_EQ(pool.stats().segments, 1u);

  pool.free(c);
  pool.free(merged);  // the segment is whole again
  void* whole = pool.allocate(2 * kMiB);
  EXPECT_EQ(whole, a);
  EXPECT_EQ(pool.stats().segments, 1u);
  pool.free(whole);
}

TEST(MemoryPool, TakesTheSmallestCachedBlockThatFits) {
  HostMemory memory;
  MemoryPool pool(memory);
  void* large_hole = pool.allocate(512 * kKiB);
  void* keep1 = pool.allocate(512);
  void* small_hole = pool.allocate(256 * kKiB);
  void* keep2 = pool.allocate(512);
  pool.free(large_hole);
  pool.free(small_hole);
  EXPECT_EQ(pool.allocate(200 * kKiB), small_hole);
  EXPECT_EQ(pool.allocate(300 * kKiB), large_hole);
  EXPECT_EQ(pool.stats().segments, 1u);
  pool.free(keep1);
  pool.free(keep2);
}

TEST(MemoryPool, LargeRequestsTakeWholeSegmentUnits) {
  HostMemory memory;
  MemoryPool pool(memory);
  void* big = pool.allocate(5 * kMiB + 1);
  PoolStats s = pool.stats();
  EXPECT_EQ(s.reserved, 6 * kMiB);
  EXPECT_EQ(s.in_use, 5 * kMiB + 512);
  void* tail = pool.allocate(1000);  // from the segment's cached rest
  EXPECT_EQ(as_bytes(tail), as_bytes(big) + 5 * kMiB + 512);
  s = pool.stats();
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.cache_hits, 1u);
  pool.free(big);
  pool.free(tail);
}

TEST(MemoryPool, StatisticsAreExactAfterAScriptedSequence) {
  HostMemory memory;
  MemoryPool pool(memory);
  int stream = 0;
  EXPECT_EQ(pool.allocate(0), nullptr);
  pool.free(nullptr);
  void* a = pool.allocate(100);                // 512, new segment (2 MiB)
  void* b = pool.allocate(3 * kMiB, &stream);  // 3 MiB, new segment (4 MiB)
  void* c = pool.allocate(513);                // 1024, cache hit
  pool.free(b);
  void* d = pool.allocate(kMiB, &stream);  // 1 MiB, cache hit
  pool.free(a);

  PoolStats s = pool.stats();
  EXPECT_EQ(s.in_use, 1024 + kMiB);
  EXPECT_EQ(s.peak_in_use, 512 + 3 * kMiB + 1024);
  EXPECT_EQ(s.reserved, 6 * kMiB);
  EXPECT_EQ(s.segments, 2u);
  EXPECT_EQ(s.allocations, 4u);
  EXPECT_EQ(s.cache_hits, 2u);

  pool.empty_cache();  // both segments hold a live block: nothing to release
  EXPECT_EQ(pool.stats().reserved, 6 * kMiB);
  pool.free(c);
  pool.empty_cache();
  s = pool.stats();
  EXPECT_EQ(s.reserved, 4 * kMiB);
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(memory.outstanding(), 1u);
  pool.free(d);
  pool.empty_cache();
  s = pool.stats();
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.reserved, 0u);
  EXPECT_EQ(s.segments, 0u);
  EXPECT_EQ(s.peak_in_use, 512 + 3 * kMiB + 1024);
  EXPECT_EQ(memory.outstanding(), 0u);
}

TEST(MemoryPool, ResetPeakMeasuresOnlyWhatComesAfter) {
  // The sequence of `tune batch` on a GPU: a candidate, everything freed, the cache emptied and
  // the peak reset, then a smaller candidate; then one that runs out of memory.
  HostMemory memory(8 * kMiB);
  MemoryPool pool(memory);
  void* kept = pool.allocate(kKiB);  // held across candidates (reset starts from in_use)
  void* big = pool.allocate(5 * kMiB);
  pool.free(big);
  EXPECT_EQ(pool.stats().peak_in_use, kKiB + 5 * kMiB);
  pool.empty_cache();
  pool.reset_peak();
  PoolStats s = pool.stats();
  EXPECT_EQ(s.peak_in_use, kKiB);
  EXPECT_EQ(s.in_use, kKiB);

  void* a = pool.allocate(kMiB);
  void* b = pool.allocate(512 * kKiB);
  pool.free(a);
  EXPECT_EQ(pool.stats().peak_in_use, kKiB + kMiB + 512 * kKiB);  // not the earlier 5 MiB
  pool.free(b);

  pool.empty_cache();
  pool.reset_peak();
  EXPECT_THROW(pool.allocate(7 * kMiB), OutOfMemory);  // 8 MiB segment on top of kept's 2 MiB
  s = pool.stats();
  EXPECT_EQ(s.peak_in_use, kKiB);  // a failed request counts nothing
  EXPECT_EQ(s.in_use, kKiB);
  void* fits = pool.allocate(4 * kMiB);  // the pool is still usable after OutOfMemory
  EXPECT_EQ(pool.stats().peak_in_use, kKiB + 4 * kMiB);
  pool.free(fits);
  pool.free(kept);
}

TEST(MemoryPool, OutOfMemoryReleasesTheCacheAndRetries) {
  HostMemory memory(4 * kMiB);
  MemoryPool pool(memory);
  int other_stream = 0;
  pool.free(pool.allocate(kMiB, &other_stream));  // 2 MiB cached, unusable on the default stream
  void* big = pool.allocate(3 * kMiB);            // needs 4 MiB: only after the cache is released
  ASSERT_NE(big, nullptr);
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.reserved, 4 * kMiB);
  EXPECT_EQ(memory.outstanding(), 1u);
  pool.free(big);
}

TEST(MemoryPool, OutOfMemoryNamesTheRequestThePoolAndTheDevice) {
  HostMemory memory(4 * kMiB);
  MemoryPool pool(memory);
  void* held = pool.allocate(3 * kMiB + 512 * kKiB);
  try {
    pool.allocate(kMiB);
    FAIL() << "expected OutOfMemory";
  } catch (const Error& e) {  // OutOfMemory is a ringtrain::Error
    const std::string m = e.what();
    EXPECT_NE(dynamic_cast<const OutOfMemory*>(&e), nullptr);
    EXPECT_NE(m.find("out of memory on host"), std::string::npos) << m;
    EXPECT_NE(m.find("requested 1.0 MiB (1048576 bytes)"), std::string::npos) << m;
    EXPECT_NE(m.find("3.5 MiB (3670016 bytes) in use"), std::string::npos) << m;
    EXPECT_NE(m.find("4.0 MiB (4194304 bytes) reserved"), std::string::npos) << m;
    EXPECT_NE(m.find("0 B free of 4.0 MiB (4194304 bytes) total"), std::string::npos) << m;
    EXPECT_NE(m.find("lower train.batch_size"), std::string::npos) << m;
  }
  pool.free(held);  // the pool is still usable: the freed segment serves the request
  void* after = pool.allocate(kMiB);
  EXPECT_NE(after, nullptr);
  EXPECT_EQ(pool.stats().segments, 1u);
  pool.free(after);
}

TEST(MemoryPool, AnAbsurdRequestIsOutOfMemory) {
  HostMemory memory;
  MemoryPool pool(memory);
  EXPECT_THROW(pool.allocate(std::numeric_limits<std::size_t>::max()), OutOfMemory);
  EXPECT_THROW(pool.allocate(std::size_t{1} << 50), OutOfMemory);  // 1 PiB
  EXPECT_EQ(pool.stats().reserved, 0u);
}

TEST(MemoryPool, RejectsForeignPointersAndDoubleFrees) {
  HostMemory memory;
  MemoryPool pool(memory);
  int foreign = 0;
  EXPECT_THROW(pool.free(&foreign), Error);
  void* p = pool.allocate(64);
  pool.free(p);
  EXPECT_THROW(pool.free(p), Error);
}

TEST(MemoryPool, ABlockUsedOnAnotherStreamIsReusedOnlyOnceThatStreamIsDone) {
  HostMemory memory;
  MemoryPool pool(memory);
  int own = 0, other = 0;
  memory.hold_events();  // the other stream is still busy with the block when it is freed
  void* used = pool.allocate(1000, &own);
  pool.record_stream(used, &other);
  pool.record_stream(used, &other);  // once per stream is enough
  pool.free(used);
  EXPECT_EQ(memory.live_events(), 1u);
  EXPECT_EQ(pool.stats().in_use, 1024u);  // pending: still in use
  void* meanwhile = pool.allocate(1000, &own);
  EXPECT_NE(meanwhile, used);
  EXPECT_EQ(pool.stats().in_use, 2048u);
  memory.finish_events();  // the other stream's work is done: the next request may take the block
  EXPECT_EQ(pool.allocate(1000, &own), used);
  EXPECT_EQ(memory.live_events(), 0u);
  EXPECT_EQ(pool.stats().in_use, 2048u);
  EXPECT_EQ(pool.stats().segments, 1u);
  pool.free(used);
  pool.free(meanwhile);
  EXPECT_EQ(pool.stats().in_use, 0u);
}

TEST(MemoryPool, ItsOwnStreamNeedsNoEvent) {
  HostMemory memory;
  MemoryPool pool(memory);
  int own = 0;
  memory.hold_events();
  void* p = pool.allocate(1000, &own);
  pool.record_stream(p, &own);
  pool.free(p);
  EXPECT_EQ(memory.live_events(), 0u);
  EXPECT_EQ(pool.allocate(1000, &own), p);
  pool.free(p);
}

TEST(MemoryPool, OutOfMemoryWaitsForTheOtherStreamsBeforeGivingUp) {
  HostMemory memory(2 * kMiB);  // room for one segment
  MemoryPool pool(memory);
  int own = 0, other = 0;
  memory.hold_events();
  void* p = pool.allocate(2 * kMiB, &own);
  pool.record_stream(p, &other);
  pool.free(p);
  void* q = nullptr;
  ASSERT_NO_THROW(q = pool.allocate(2 * kMiB, &own));  // waits for the event, then reuses the memory
  EXPECT_EQ(memory.live_events(), 0u);
  EXPECT_EQ(memory.outstanding(), 1u);
  pool.free(q);
}

TEST(MemoryPool, APendingBlockIsNotHandedOutOrFreedTwice) {
  HostMemory memory;
  int other = 0;
  {
    MemoryPool pool(memory);
    memory.hold_events();
    void* p = pool.allocate(1000);
    pool.record_stream(p, &other);
    pool.free(p);
    EXPECT_THROW(pool.free(p), Error);
    EXPECT_THROW(pool.record_stream(p, &other), Error);
    int not_ours = 0;
    EXPECT_THROW(pool.record_stream(&not_ours, &other), Error);
    pool.empty_cache();  // its segment is not wholly free while the block is pending
    EXPECT_EQ(memory.outstanding(), 1u);
  }  // destroyed with the block pending: its event goes too
  EXPECT_EQ(memory.live_events(), 0u);
  EXPECT_EQ(memory.outstanding(), 0u);
}

TEST(MemoryPool, ReturnsEverySegmentWhenDestroyed) {
  HostMemory memory;
  {
    MemoryPool pool(memory);
    int stream = 0;
    pool.allocate(100);
    pool.allocate(5 * kMiB, &stream);
    pool.free(pool.allocate(kMiB));
    EXPECT_EQ(memory.outstanding(), 2u);
  }
  EXPECT_EQ(memory.outstanding(), 0u);
  EXPECT_EQ(memory.info().free, memory.info().total);
}

// Threads allocate, fill, check and free blocks on a shared and on their own stream; a block
// handed to two owners at once would fail the check.
TEST(MemoryPool, ThreadsShareAPoolSafely) {
  constexpr int kThreads = 4;
  constexpr int kSteps = 3000;
  HostMemory memory;
  MemoryPool pool(memory);
  std::vector<int> own_streams(kThreads);
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Rng rng(static_cast<std::uint64_t>(t) + 1);
      std::vector<std::pair<unsigned char*, std::size_t>> live;
      const auto release_one = [&](std::size_t i) {
        auto [ptr, bytes] = live[i];
        for (std::size_t k = 0; k < bytes; ++k) failures[t] += ptr[k] != static_cast<unsigned char>(t + 1);
        pool.free(ptr);
        live[i] = live.back();
        live.pop_back();
      };
      for (int step = 0; step < kSteps; ++step) {
        if (live.size() < 8 && rng.below(3) != 0) {
          const std::size_t bytes = 1 + rng.below(rng.below(8) == 0 ? 3 * kMiB : 64 * kKiB);
          StreamHandle stream = rng.below(2) == 0 ? nullptr : &own_streams[t];
          auto* ptr = static_cast<unsigned char*>(pool.allocate(bytes, stream));
          std::memset(ptr, t + 1, bytes);
          live.emplace_back(ptr, bytes);
        } else if (!live.empty()) {
          release_one(rng.below(live.size()));
        }
      }
      while (!live.empty()) release_one(0);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_GT(s.cache_hits, 0u);
  pool.empty_cache();
  EXPECT_EQ(pool.stats().reserved, 0u);
  EXPECT_EQ(memory.outstanding(), 0u);
}

}  // namespace
}  // namespace ringtrain
