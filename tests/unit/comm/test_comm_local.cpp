// Single-process parts of the comm module: bucket planning tiles the arena exactly once and
// cuts only at layer starts; the comm thread runs jobs (allreduce, reduce-scatter) in order and
// surfaces errors; staged buckets wait for their shared buffer; backends without the sharding collectives say so; the
// watchdog fires for an operation that overstays and stays quiet otherwise.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "ringtrain/comm/comm_thread.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/grad_bucketer.hpp"
#include "ringtrain/comm/watchdog.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {

void expect_tiles(const std::vector<Bucket>& buckets, std::int64_t n) {
  std::int64_t end = n;
  for (const auto& b : buckets) {
    EXPECT_EQ(b.end, end);
    EXPECT_LT(b.begin, b.end);
    end = b.begin;
  }
  EXPECT_EQ(end, 0);
}

TEST(PlanBuckets, CoversTheArenaOnceAndCutsOnlyAtLayerStarts) {
  // CNN-like: conv1 [0,320) conv2 [320,18816) fc1 [18816,420352) fc2 [420352,421642)
  const std::vector<std::int64_t> cuts{0, 320, 18816, 420352};
  const auto b = plan_buckets(421642, cuts, 1 << 18, 1 << 16);
  expect_tiles(b, 421642);
  ASSERT_EQ(b.size(), 2u);  // fc2+fc1 (first target reached inside fc1), then conv2+conv1
  EXPECT_EQ(b[0].begin, 18816);
  EXPECT_EQ(b[1].begin, 0);
  for (const auto& bucket : b)
    EXPECT_TRUE(std::find(cuts.begin(), cuts.end(), bucket.begin) != cuts.end()) << bucket.begin;
}

TEST(PlanBuckets, TinyTargetsGiveOneBucketPerLayerAndHugeOnesOneBucket) {
  const std::vector<std::int64_t> cuts{0, 10, 25, 40};
  const auto per_layer = plan_buckets(50, cuts, 1, 1);
  expect_tiles(per_layer, 50);
  EXPECT_EQ(per_layer.size(), 4u);
  const auto one = plan_buckets(50, cuts, 1000, 1000);
  expect_tiles(one, 50);
  EXPECT_EQ(one.size(), 1u);
  EXPECT_TRUE(plan_buckets(0, {}, 1, 1).empty());
  EXPECT_THROW(plan_buckets(50, cuts, 0, 1), ConfigError);
}

// A Communicator that records what it was asked to do (single process).
class RecordingComm : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view name() const override { return "recording"; }
  void allreduce_sum(void* data, std::size_t count, DType) override {
    if (fail_on_ == calls_.size()) {
      calls_.push_back(count);
      throw CommError("injected failure");
    }
    calls_.push_back(count);
    static_cast<float*>(data)[0] += 1.0f;  // visible effect
  }
  void reduce_scatter_sum(void* data, std::size_t count, DType) override {
    calls_.push_back(count);
    static_cast<float*>(data)[0] += 100.0f;  // told apart from an allreduce
  }
  void allgather(void* data, std::size_t, DType) override { static_cast<float*>(data)[0] += 1000.0f; }
  void broadcast(void*, std::size_t, int) override {}
  void barrier() override {}
  std::vector<std::size_t> calls_;
  std::size_t fail_on_ = static_cast<std::size_t>(-1);
};

TEST(CommThread, RunsJobsInOrderAndWaits) {
  RecordingComm comm;
  std::vector<float> data(8, 0.0f);
  {
    CommThread thread(comm);
    std::atomic<int> done{0};
    for (std::size_t i = 1; i <= 5; ++i) thread.allreduce_sum(data.data(), i, DType::f32, [&](auto, auto) { ++done; });
    thread.wait_all();
    EXPECT_EQ(done.load(), 5);
  }
  EXPECT_EQ(comm.calls_, (std::vector<std::size_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(data[0], 5.0f);
}

TEST(CommThread, SurfacesTheFirstErrorAndDropsTheRest) {
  RecordingComm comm;
  comm.fail_on_ = 1;
  std::vector<float> data(4, 0.0f);
  CommThread thread(comm);
  for (int i = 0; i < 4; ++i) thread.allreduce_sum(data.data(), 4, DType::f32);
  EXPECT_THROW(thread.wait_all(), CommError);
  EXPECT_EQ(comm.calls_.size(), 2u);
  thread.allreduce_sum(data.data(), 4, DType::f32);  // usable again afterwards
  EXPECT_NO_THROW(thread.wait_all());
}

TEST(CommThread, RunsReduceScattersInOrderWithAllreduces) {
  RecordingComm comm;
  std::vector<float> data(8, 0.0f);
  std::vector<int> done_order;
  {
    CommThread thread(comm);
    thread.allreduce_sum(data.data(), 1, DType::f32, [&](auto, auto) { done_order.push_back(1); });
    thread.reduce_scatter_sum(data.data(), 2, DType::f32, [&](auto, auto) { done_order.push_back(2); });
    thread.allreduce_sum(data.data(), 3, DType::f32);
    thread.reduce_scatter_sum(data.data(), 4, DType::f32, [&](auto, auto) { done_order.push_back(4); });
    thread.wait_all();
  }
  EXPECT_EQ(comm.calls_, (std::vector<std::size_t>{1, 2, 3, 4}));
  EXPECT_EQ(data[0], 202.0f) << "two allreduces and two reduce-scatters";
  EXPECT_EQ(done_order, (std::vector<int>{1, 2, 4}));
}

// Only the collectives every backend must have: the sharding ones are the base class's.
class AllreduceOnlyComm : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view name() const override { return "allreduce-only"; }
  void allreduce_sum(void*, std::size_t, DType) override {}
  void broadcast(void*, std::size_t, int) override {}
  void barrier() override {}
};

TEST(Communicator, ShardingCollectivesNotOverriddenSayWhoLacksThem) {
  AllreduceOnlyComm comm;
  float x = 0.0f;
  auto message = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const CommError& e) {
      return e.what();
    }
    return "<no CommError>";
  };
  EXPECT_EQ(message([&] { comm.reduce_scatter_sum(&x, 1, DType::f32); }),
            "reduce_scatter_sum: not supported by allreduce-only yet");
  EXPECT_EQ(message([&] { comm.reduce_scatter_sum_after(0, &x, 1, DType::f32); }),
            "reduce_scatter_sum: not supported by allreduce-only yet");
  EXPECT_EQ(message([&] { comm.allgather(&x, 1, DType::f32); }), "allgather: not supported by allreduce-only yet");
}

// The first call blocks until `release` is set: jobs queued behind it are still waiting.
class GatedComm : public RecordingComm {
 public:
  void allreduce_sum(void* data, std::size_t count, DType dtype) override {
    started = true;
    while (!release) std::this_thread::yield();
    RecordingComm::allreduce_sum(data, count, dtype);
  }
  std::atomic<bool> started{false}, release{false};
};

TEST(CommThread, DestructionDropsJobsNotYetStarted) {
  GatedComm comm;
  std::vector<float> data(4, 0.0f);
  std::thread releaser;
  {
    CommThread thread(comm);
    for (int i = 0; i < 4; ++i) thread.allreduce_sum(data.data(), 4, DType::f32);
    while (!comm.started) std::this_thread::yield();
    // Release the running job only once destruction is under way (as when an exception
    // unwinds the compute thread): the three queued jobs must never start.
    releaser = std::thread([&comm] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      comm.release = true;
    });
  }
  releaser.join();
  EXPECT_EQ(comm.calls_.size(), 1u);
}

// A device-style Communicator: mark_inputs_ready mints tokens (noting the calling thread) and
// allreduce_sum_after records the token each collective was given.
class MarkingComm : public RecordingComm {
 public:
  std::uint64_t mark_inputs_ready() override {
    mark_threads_.push_back(std::this_thread::get_id());
    return ++marks_;
  }
  void allreduce_sum_after(std::uint64_t ready, void* data, std::size_t count, DType dtype) override {
    tokens_.push_back(ready);
    allreduce_sum(data, count, dtype);
  }
  void reduce_scatter_sum_after(std::uint64_t ready, void* data, std::size_t count, DType dtype) override {
    tokens_.push_back(ready);
    reduce_scatter_sum(data, count, dtype);
  }
  std::uint64_t marks_ = 0;
  std::vector<std::thread::id> mark_threads_;
  std::vector<std::uint64_t> tokens_;
};

// An overlapping bucketer over a 50-element arena in four buckets ([40,50), [25,40), [10,25),
// [0,10) in launch order), its step begun.
struct FourBuckets {
  explicit FourBuckets(Communicator& comm)
      : bucketer(grads.data(), 50, plan_buckets(50, {0, 10, 25, 40}, 1, 1), comm, true, nullptr) {
    bucketer.begin_step(nullptr);
  }
  std::vector<float> grads = std::vector<float>(50, 0.0f);
  GradBucketer bucketer;
};

// Each bucket is launched when its layers are ready and waits for the mark made then.
TEST(GradBucketer, OverlapLaunchesAsLayersBecomeReadyEachAfterItsMark) {
  MarkingComm comm;
  FourBuckets four(comm);
  GradBucketer& bucketer = four.bucketer;
  bucketer.on_ready(40);
  EXPECT_EQ(comm.marks_, 1u) << "the mark is made when the bucket is ready, on the compute thread";
  bucketer.on_ready(25);
  const BucketTimes t = bucketer.finish();  // launches [10,25) and [0,10)
  EXPECT_GE(t.allreduce_s, 0.0);
  EXPECT_EQ(comm.calls_, (std::vector<std::size_t>{10, 15, 15, 10}));
  EXPECT_EQ(comm.tokens_, (std::vector<std::uint64_t>{1, 2, 3, 4}));
  for (const std::thread::id& id : comm.mark_threads_) EXPECT_EQ(id, std::this_thread::get_id());
}

// A stream-style Communicator (NCCL's shape): allreduces are only enqueued, and reduced when
// complete() is called, which reports their "device time".
class EnqueuingComm : public MarkingComm {
 public:
  void enqueue_allreduce_sum_after(std::uint64_t ready, void* data, std::size_t count, DType) override {
    tokens_.push_back(ready);
    pending_.emplace_back(static_cast<float*>(data), count);
  }
  double complete() override {
    completions_.push_back(pending_.size());
    for (const auto& [data, count] : pending_) {
      calls_.push_back(count);
      data[0] += 1.0f;
    }
    pending_.clear();
    return 0.25;
  }
  std::vector<std::pair<float*, std::size_t>> pending_;
  std::vector<std::size_t> completions_;  // per complete(): how many it found enqueued
};

// With a communicator that enqueues, every bucket is queued behind the previous one with no
// wait between them, and finish() completes them all at once and counts their device time.
TEST(GradBucketer, EnqueuedBucketsAreCompletedOnceAtTheEnd) {
  EnqueuingComm comm;
  FourBuckets four(comm);
  GradBucketer& bucketer = four.bucketer;
  const std::vector<float>& grads = four.grads;
  bucketer.on_ready(40);
  bucketer.on_ready(25);
  const BucketTimes t = bucketer.finish();
  EXPECT_EQ(comm.completions_, (std::vector<std::size_t>{4})) << "one completion, after all four";
  EXPECT_EQ(comm.calls_, (std::vector<std::size_t>{10, 15, 15, 10}));
  EXPECT_EQ(comm.tokens_, (std::vector<std::uint64_t>{1, 2, 3, 4}));
  for (std::int64_t begin : {0, 10, 25, 40}) EXPECT_EQ(grads[static_cast<std::size_t>(begin)], 1.0f) << begin;
  EXPECT_GE(t.allreduce_s, 0.25) << "the enqueued collectives' device time";
  bucketer.begin_step(nullptr);
  const double next = bucketer.finish().allreduce_s;
  EXPECT_GE(next, 0.25);
  EXPECT_LT(next, 0.5) << "the next step's, not a running total";
  EXPECT_EQ(comm.completions_, (std::vector<std::size_t>{4, 4}));
}

// A reduce-scatter that takes a while and records the first value of its data when it ends.
class SlowScatterComm : public RecordingComm {
 public:
  void reduce_scatter_sum(void* data, std::size_t count, DType) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    calls_.push_back(count);
    seen_.push_back(static_cast<float*>(data)[0]);
  }
  std::vector<float> seen_;
};

// An earlier micro-batch of two staged buckets [25, 50) and [0, 25) sharing `buffer`: backward
// writes 3s into the first, 4s into the second. Returns the carry they went into.
std::vector<float> accumulate_threes_then_fours(GradBucketer& bucketer, std::vector<float>& buffer) {
  std::vector<float> carry(50, -1.0f);
  bucketer.begin_accumulation(carry.data(), true);
  buffer.assign(25, 3.0f);
  bucketer.on_ready(25);
  buffer.assign(25, 4.0f);
  bucketer.on_ready(0);
  return carry;
}

// Staged buckets sharing one buffer: the next bucket's gradients are written only once the
// previous one's (slow) reduce-scatter is done with the buffer, so each collective sees its own.
TEST(GradBucketer, StagedBucketsWaitForTheirBufferAndAccumulateOneByOne) {
  SlowScatterComm comm;
  std::vector<float> buffer(25, 0.0f);
  const std::vector<Bucket> buckets = plan_buckets(50, {0, 25}, 1, 1);  // [25,50) then [0,25)
  std::vector<std::size_t> reduced;
  BucketStaging staging{{buffer.data(), buffer.data()}, {-1, 0}, [&](std::size_t i) { reduced.push_back(i); }};
  GradBucketer bucketer(nullptr, 50, buckets, comm, true, nullptr, BucketReduction::reduce_scatter, staging);
  bucketer.begin_step(nullptr);
  buffer[0] = 1.0f;       // backward writes bucket 0
  bucketer.on_ready(25);  // launches it, and returns once bucket 1 may write the buffer
  buffer[0] = 2.0f;       // bucket 1
  bucketer.on_ready(0);
  bucketer.finish();
  EXPECT_EQ(comm.seen_, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(reduced, (std::vector<std::size_t>{0, 1}));
  // An earlier micro-batch: each bucket goes into the carry as it is ready, nothing is reduced.
  const std::vector<float> carry = accumulate_threes_then_fours(bucketer, buffer);
  EXPECT_EQ(carry[30], 3.0f);
  EXPECT_EQ(carry[5], 4.0f);
  EXPECT_EQ(comm.calls_.size(), 2u);
}

// What backward leaves unwritten in a staged bucket (the arena's alignment pads) still holds
// the previous bucket's gradients in a shared buffer: zeroed before the collective or the
// carry reads it, so pads reach neither the sums nor the optimizer.
TEST(GradBucketer, StagedBucketsZeroWhatBackwardDoesNotWrite) {
  SlowScatterComm comm;
  std::vector<float> buffer(25, 0.0f);
  const std::vector<Bucket> buckets = plan_buckets(50, {0, 25}, 1, 1);  // [25,50) then [0,25)
  BucketStaging staging{{buffer.data(), buffer.data()}, {-1, 0}, {}, {{}, {{0, 1}, {20, 5}}}};
  GradBucketer bucketer(nullptr, 50, buckets, comm, true, nullptr, BucketReduction::reduce_scatter, staging);
  bucketer.begin_step(nullptr);
  buffer.assign(25, 1.0f);  // bucket 0 writes all of it
  bucketer.on_ready(25);
  std::fill_n(buffer.begin() + 1, 19, 2.0f);  // bucket 1 writes [1, 20) only
  bucketer.on_ready(0);
  bucketer.finish();
  EXPECT_EQ(comm.seen_, (std::vector<float>{1.0f, 0.0f})) << "bucket 1's element 0 is a pad";
  EXPECT_EQ(buffer[20], 0.0f);
  EXPECT_EQ(buffer[19], 2.0f);
  // Accumulating: the carry's pads are zeros too.
  const std::vector<float> carry = accumulate_threes_then_fours(bucketer, buffer);
  EXPECT_EQ(carry[0], 0.0f);
  EXPECT_EQ(carry[1], 4.0f);
  EXPECT_EQ(carry[24], 0.0f);
  EXPECT_EQ(carry[25], 3.0f);
}

TEST(CommThread, PassesEachJobItsReadyToken) {
  MarkingComm comm;
  std::vector<float> data(4, 0.0f);
  {
    CommThread thread(comm);
    thread.allreduce_sum(data.data(), 4, DType::f32, {}, 7);
    thread.reduce_scatter_sum(data.data(), 4, DType::f32, {}, 9);
    thread.wait_all();
  }
  EXPECT_EQ(comm.tokens_, (std::vector<std::uint64_t>{7, 9}));
  EXPECT_EQ(data[0], 101.0f);
}

TEST(Watchdog, DecoratorPassesMarksThrough) {
  Watchdog dog(5.0, [](const std::string&) {});
  auto inner = std::make_unique<MarkingComm>();
  MarkingComm* marking = inner.get();
  auto watched = watch_collectives(std::move(inner), dog, "gradient");
  float x = 0.0f;
  const std::uint64_t token = watched->mark_inputs_ready();
  watched->allreduce_sum_after(token, &x, 1, DType::f32);
  EXPECT_EQ(token, 1u);
  EXPECT_EQ(marking->tokens_, (std::vector<std::uint64_t>{1}));
  EXPECT_EQ(x, 1.0f);
}

// Records when and with what message the watchdog fired.
struct Firing {
  std::mutex m;
  std::string message;
  std::optional<Watchdog::Clock::time_point> at;
  std::function<void(const std::string&)> handler() {
    return [this](const std::string& msg) {
      std::lock_guard lock(m);
      message = msg;
      at = Watchdog::Clock::now();
    };
  }
  bool fired() {
    std::lock_guard lock(m);
    return at.has_value();
  }
  // Waits up to `limit` for the firing; seconds from `since` to it, or -1.
  double seconds_after(Watchdog::Clock::time_point since, double limit) {
    for (int i = 0; i < static_cast<int>(limit * 100) && !fired(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard lock(m);
    return at ? std::chrono::duration<double>(*at - since).count() : -1.0;
  }
};

// Fires for the overdue operation only, and on time: not before the timeout, and within 1.5x
// of it (the monitor checks four times per timeout).
TEST(Watchdog, FiresForAnOverdueOperationOnlyAndOnTime) {
  Firing firing;
  Watchdog dog(1.0, firing.handler());
  const auto quick = dog.begin("quick op");
  dog.done(quick);
  {
    const WatchedScope scoped(dog, "scoped op");  // done when the scope ends, also by an exception
    EXPECT_THROW(throw std::runtime_error("x"), std::runtime_error);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_FALSE(firing.fired());
  const auto begun = Watchdog::Clock::now();
  dog.begin("allreduce #7 of 1000 f32");
  const double after = firing.seconds_after(begun, 5.0);
  EXPECT_GE(after, 1.0);
  EXPECT_LE(after, 1.5);
  std::lock_guard lock(firing.m);
  EXPECT_NE(firing.message.find("allreduce #7 of 1000 f32 did not finish within comm.timeout_s = 1 s"),
            std::string::npos)
      << firing.message;
}

// An operation with a budget of its own (a checkpoint save) is not cut at the collective
// timeout, and the message names the key that set its budget.
TEST(Watchdog, AnOperationWithItsOwnBudgetGetsIt) {
  Firing firing;
  Watchdog dog(0.2, firing.handler());
  const auto begun = Watchdog::Clock::now();
  dog.begin("checkpoint save of step 5", Watchdog::Budget{1.0, "checkpoint.timeout_s"});
  const double after = firing.seconds_after(begun, 5.0);
  EXPECT_GE(after, 1.0);
  EXPECT_LE(after, 1.5);
  std::lock_guard lock(firing.m);
  EXPECT_NE(firing.message.find("checkpoint save of step 5 did not finish within checkpoint.timeout_s = 1 s"),
            std::string::npos)
      << firing.message;
  EXPECT_NE(firing.message.find("or the file system stopped answering"), std::string::npos) << firing.message;
}

TEST(Watchdog, DecoratorNumbersCollectives) {
  std::string message;
  Watchdog dog(0.1, [&](const std::string& msg) { message = msg; });
  auto watched = watch_collectives(std::make_unique<RecordingComm>(), dog, "gradient");
  float x = 0.0f;
  watched->allreduce_sum(&x, 1, DType::f32);
  watched->allreduce_sum(&x, 1, DType::f32);
  watched->reduce_scatter_sum(&x, 1, DType::f32);  // passed through, not the base class's error
  watched->allgather(&x, 1, DType::f32);
  EXPECT_EQ(x, 1102.0f);
  EXPECT_EQ(watched->name(), "recording");
  EXPECT_TRUE(message.empty());
}

}  // namespace
}  // namespace ringtrain
