// The MPI communicator under mpirun: allreduce on every path (our ring through shared memory
// and over MPI messages, MPI_Allreduce) for every summable dtype, counts around the world
// size, primes, many rounds and slices, repeated calls of varying sizes, bf16 on the wire,
// waits that yield the core to a busy thread; reduce-scatter (bitwise allreduce's sums on the
// own shard) and allgather (bit-exact copies); broadcast, barrier, and the config errors.
#include <gtest/gtest.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/shm_allreduce.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/shard.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/dtype.hpp"
#include "support/test_context.hpp"

namespace ringtrain {

// An allreduce path: how to build it and the name the communicator reports. All test ranks
// share one node, so the default ring takes shared memory.
struct Path {
  const char* label;
  CommOptions options;
  std::string_view comm_name;
};
const Path kShm{"shm", {.algo = AllreduceAlgo::ring}, "mpi-ring-shm"};
const Path kP2p{"p2p", {.algo = AllreduceAlgo::ring, .shared_memory = false}, "mpi-ring"};
const Path kMpi{"mpi", {.algo = AllreduceAlgo::mpi}, "mpi-allreduce"};

// Readable parameters in gtest's failure lines (found by ADL, hence outside the anonymous namespace).
void PrintTo(const Path& path, std::ostream* os) { *os << path.label; }
void PrintTo(DType dtype, std::ostream* os) { *os << dtype_name(dtype); }

namespace {

using test::context;

std::unique_ptr<Communicator> make(const Path& path, DType wire = DType::f32) {
  CommOptions options = path.options;
  options.wire_dtype = wire;
  return make_mpi_communicator(context(), options);
}

// Elements one shared-memory round carries at f32: counts around multiples of it cross rounds.
constexpr std::size_t kRoundF32 = comm::kShmSlotBytes / sizeof(float);

// `count` elements of `dtype`, written and read as double, with one guard element on each
// side so that a write past either end of the reduced range is caught.
class Buffer {
 public:
  Buffer(DType dtype, std::size_t count) : dtype_(dtype), count_(count), bytes_((count + 2) * dtype_size(dtype)) {
    std::memset(bytes_.data(), kGuard, bytes_.size());
  }
  void* data() { return bytes_.data() + dtype_size(dtype_); }
  std::size_t count() const { return count_; }

  void set(std::size_t i, double v) {
    std::byte* p = bytes_.data() + (i + 1) * dtype_size(dtype_);
    switch (dtype_) {
      case DType::f32: store(p, static_cast<float>(v)); break;
      case DType::f64: store(p, v); break;
      case DType::bf16: store(p, float_to_bf16(static_cast<float>(v))); break;
      case DType::f16: store(p, float_to_f16(static_cast<float>(v))); break;
      case DType::i32: store(p, static_cast<std::int32_t>(v)); break;
      case DType::u8: store(p, static_cast<std::uint8_t>(v)); break;
    }
  }
  double get(std::size_t i) const {
    const std::byte* p = bytes_.data() + (i + 1) * dtype_size(dtype_);
    switch (dtype_) {
      case DType::f32: return load<float>(p);
      case DType::f64: return load<double>(p);
      case DType::bf16: return bf16_to_float(load<std::uint16_t>(p));
      case DType::f16: return f16_to_float(load<std::uint16_t>(p));
      case DType::i32: return load<std::int32_t>(p);
      case DType::u8: return load<std::uint8_t>(p);
    }
    return 0;
  }
  bool guards_intact() const {
    const std::size_t e = dtype_size(dtype_);
    for (std::size_t b = 0; b < e; ++b)
      if (bytes_[b] != std::byte{kGuard} || bytes_[bytes_.size() - 1 - b] != std::byte{kGuard}) return false;
    return true;
  }
  // Whether elements [begin, end) hold the same bytes here and in `other` (same dtype).
  bool same_bits(const Buffer& other, std::size_t begin, std::size_t end) const {
    const std::size_t e = dtype_size(dtype_);
    return std::equal(bytes_.begin() + static_cast<std::ptrdiff_t>((begin + 1) * e),
                      bytes_.begin() + static_cast<std::ptrdiff_t>((end + 1) * e),
                      other.bytes_.begin() + static_cast<std::ptrdiff_t>((begin + 1) * e));
  }
  // Element i's bytes taken from a 64-bit pattern (any bits: NaN payloads, values bf16 rounds).
  void set_bits(std::size_t i, std::uint64_t bits) {
    std::memcpy(bytes_.data() + (i + 1) * dtype_size(dtype_), &bits, dtype_size(dtype_));
  }
  // FNV-1a over the reduced elements: equal on all ranks iff (almost surely) bitwise equal.
  std::uint64_t hash() const {
    std::uint64_t h = 1469598103934665603ull;
    const std::size_t e = dtype_size(dtype_);
    for (std::size_t b = e; b < e + count_ * e; ++b)
      h = (h ^ std::to_integer<std::uint64_t>(bytes_[b])) * 1099511628211ull;
    return h;
  }

 private:
  static constexpr unsigned char kGuard = 0xA5;
  template <typename T>
  static void store(std::byte* p, T v) {
    std::memcpy(p, &v, sizeof v);
  }
  template <typename T>
  static T load(const std::byte* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  DType dtype_;
  std::size_t count_;
  std::vector<std::byte> bytes_;
};

// Small integers 0..3 that differ between ranks: every partial sum (at most 3 * ranks) is
// exactly representable in every dtype, bf16 included, so the expected sum is exact.
int small_value(int rank, std::size_t i) {
  return static_cast<int>((static_cast<std::size_t>(rank) * 5 + i * 3 + (i >> 7)) % 4);
}

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Non-integer values in [0.5, 1.5) (no cancellation, so relative error stays meaningful);
// wide-range integers for i32.
double rough_value(DType dtype, int rank, std::size_t i) {
  const std::uint64_t bits = splitmix((static_cast<std::uint64_t>(rank) << 40) ^ i);
  if (dtype == DType::i32) return static_cast<double>(static_cast<std::int64_t>(bits % 2000001) - 1000000);
  return 0.5 + static_cast<double>(bits >> 11) * 0x1.0p-53;
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f32: return test::kTolF32;
    case DType::f64: return 1e-12;
    case DType::bf16:
    case DType::f16: return test::kTolHalf;
    default: return 0.0;  // i32: exact
  }
}

// Whether every rank holds the same 64-bit value (min == max over the world).
bool same_on_all_ranks(std::uint64_t v) {
  std::uint64_t lo = 0, hi = 0;
  MPI_Allreduce(&v, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&v, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

template <typename E>
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "<no exception>";
}

// Fills with small_value, allreduces, and returns the number of wrong elements (reporting
// the first) plus whether the guards survived.
void check_exact_sum(Communicator& comm, DType dtype, std::size_t count) {
  const int rank = context().world_rank();
  const int size = context().world_size();
  Buffer buf(dtype, count);
  for (std::size_t i = 0; i < count; ++i) buf.set(i, small_value(rank, i));
  comm.allreduce_sum(buf.data(), count, dtype);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    double expected = 0;
    for (int r = 0; r < size; ++r) expected += small_value(r, i);
    if (buf.get(i) != expected && wrong++ == 0)
      ADD_FAILURE() << "count " << count << ": element " << i << " is " << buf.get(i) << ", expected " << expected;
  }
  EXPECT_EQ(wrong, 0u) << "count " << count << " dtype " << dtype_name(dtype);
  EXPECT_TRUE(buf.guards_intact()) << "count " << count << ": wrote outside the buffer";
}

using Param = std::tuple<Path, DType>;

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(std::get<0>(info.param).label) + "_" + std::string(dtype_name(std::get<1>(info.param)));
}

class AllreduceTest : public ::testing::TestWithParam<Param> {
 protected:
  const Path& path() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }
};

TEST_P(AllreduceTest, ExactSumForAwkwardCounts) {
  auto comm = make(path());
  const std::size_t w = static_cast<std::size_t>(context().world_size());
  // Largest first, then smaller: later calls run on a scratch grown by an earlier one.
  for (std::size_t count :
       {std::size_t{65537}, std::size_t{0}, std::size_t{1}, w - 1, w, w + 1, std::size_t{7}, std::size_t{1009}})
    check_exact_sum(*comm, dtype(), count);
}

TEST_P(AllreduceTest, CountZeroDoesNothingAndLeavesPeersInStep) {
  auto comm = make(path());
  comm->allreduce_sum(nullptr, 0, dtype());
  Buffer buf(dtype(), 0);
  comm->allreduce_sum(buf.data(), 0, dtype());
  EXPECT_TRUE(buf.guards_intact());
  // A stray message from the empty calls would be received here and corrupt this sum.
  check_exact_sum(*comm, dtype(), 3);
}

TEST_P(AllreduceTest, RoughValuesMatchReferenceAndAgreeBitwise) {
  auto comm = make(path());
  const int rank = context().world_rank();
  const int size = context().world_size();
  for (std::size_t count : {std::size_t{3}, std::size_t{10007}}) {
    Buffer buf(dtype(), count);
    for (std::size_t i = 0; i < count; ++i) buf.set(i, rough_value(dtype(), rank, i));
    comm->allreduce_sum(buf.data(), count, dtype());
    // Reference: the double sum of the inputs as this dtype stores them.
    Buffer input(dtype(), 1);
    double worst = 0;
    std::size_t worst_at = 0;
    for (std::size_t i = 0; i < count; ++i) {
      double ref = 0;
      for (int r = 0; r < size; ++r) {
        input.set(0, rough_value(dtype(), r, i));
        ref += input.get(0);
      }
      const double err = test::rel_error(buf.get(i), ref);
      if (err > worst) {
        worst = err;
        worst_at = i;
      }
    }
    EXPECT_LE(worst, tolerance(dtype())) << "count " << count << ": worst element " << worst_at;
    EXPECT_TRUE(buf.guards_intact());
    EXPECT_TRUE(same_on_all_ranks(buf.hash())) << "count " << count << ": ranks disagree bitwise";
  }
}

TEST_P(AllreduceTest, NameRankAndSize) {
  auto comm = make(path());
  EXPECT_EQ(comm->name(), path().comm_name);
  EXPECT_EQ(comm->rank(), context().world_rank());
  EXPECT_EQ(comm->size(), context().world_size());
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, AllreduceTest,
                         ::testing::Combine(::testing::Values(kShm, kP2p, kMpi),
                                            ::testing::Values(DType::f32, DType::f64, DType::bf16, DType::f16,
                                                              DType::i32)),
                         param_name);

// Large enough that every segment is cut into several ring slices plus a short one, and that
// the shared-memory path goes through both staging slots several times with a short last round.
class LargeAllreduceTest : public AllreduceTest {};

TEST_P(LargeAllreduceTest, ExactSumOverManySlices) {
  auto comm = make(path());
  check_exact_sum(*comm, dtype(), std::size_t{4} * 1024 * 1024 + 3);
}

INSTANTIATE_TEST_SUITE_P(Large, LargeAllreduceTest,
                         ::testing::Combine(::testing::Values(kShm, kP2p, kMpi),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         param_name);

TEST(AllreduceErrors, U8IsRejectedWithTheSupportedList) {
  const std::string expected = "allreduce: dtype u8 not supported (supported: f32, f64, bf16, f16, i32)";
  for (const Path& path : {kShm, kP2p, kMpi}) {
    auto comm = make(path);
    std::vector<std::uint8_t> bytes(16, 1);
    EXPECT_EQ(message_of<CommError>([&] { comm->allreduce_sum(bytes.data(), bytes.size(), DType::u8); }), expected);
    EXPECT_EQ(message_of<CommError>([&] { comm->allreduce_sum(nullptr, 0, DType::u8); }), expected);
    // The rejected call must not have left anything in flight.
    check_exact_sum(*comm, DType::f32, 5);
  }
}

TEST(AllreduceAlgoConfig, NamesThem) {
  EXPECT_EQ(allreduce_algo_name(AllreduceAlgo::ring), "ring");
  EXPECT_EQ(allreduce_algo_name(AllreduceAlgo::mpi), "mpi");
}

TEST(WireDtypeConfig, ParsesKnownValuesAndNamesKeyOtherwise) {
  EXPECT_EQ(parse_wire_dtype("f32"), DType::f32);
  EXPECT_EQ(parse_wire_dtype("bf16"), DType::bf16);
  EXPECT_EQ(message_of<ConfigError>([] { parse_wire_dtype("fp16"); }),
            "comm.wire_dtype: unknown value 'fp16' (known: f32, bf16)");
  EXPECT_EQ(message_of<ConfigError>([] { parse_wire_dtype("BF16", "train.comm.wire_dtype"); }),
            "train.comm.wire_dtype: unknown value 'BF16' (known: f32, bf16)");
}

TEST(WireDtypeConfig, Bf16NeedsTheRingAndOnlyF32OrBf16Travel) {
  EXPECT_EQ(message_of<ConfigError>([] { make(kMpi, DType::bf16); }),
            "comm.wire_dtype: bf16 needs comm.allreduce = \"ring\" (MPI_Allreduce sends the data as it is)");
  EXPECT_EQ(message_of<ConfigError>([] { make(kShm, DType::f16); }),
            "comm.wire_dtype: f16 not supported (supported: f32, bf16)");
  // The rejected options built nothing: the next communicator pairs up with the peers' one.
  check_exact_sum(*make(kShm, DType::bf16), DType::f32, 1009);
}

TEST(AlgoOverload, IsTheDefaultOptions) {
  EXPECT_EQ(make_mpi_communicator(context(), AllreduceAlgo::ring)->name(), kShm.comm_name);
  EXPECT_EQ(make_mpi_communicator(context(), AllreduceAlgo::mpi)->name(), kMpi.comm_name);
}

// The two ring paths (shared memory, MPI messages).
class RingPathTest : public ::testing::TestWithParam<Path> {};

TEST_P(RingPathTest, RepeatedCallsOfVaryingSizesAndDtypes) {
  auto comm = make(GetParam());
  // Several rounds with a short last one (the first two timed rounds of a communicator write
  // with plain, then streaming stores, see StoreChoice), then sizes that leave the staging
  // slots at odd phases, dtypes whose wire elements have other sizes, empty and tiny calls.
  const std::tuple<std::size_t, DType> calls[] = {{3 * kRoundF32 + 5, DType::f32},
                                                  {1, DType::f32},
                                                  {0, DType::f64},
                                                  {kRoundF32, DType::bf16},
                                                  {kRoundF32 - 1, DType::f64},
                                                  {7, DType::i32},
                                                  {2 * kRoundF32 + 1, DType::f16},
                                                  {65537, DType::f32},
                                                  {kRoundF32 + 1, DType::f32}};
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& [count, dtype] : calls) check_exact_sum(*comm, dtype, count);
}

// f32 on a bf16 wire: sums formed in f32 and rounded to bf16 to travel, so the results are
// bf16 values within bf16 tolerance of the double reference, bitwise the same on all ranks.
TEST_P(RingPathTest, WireBf16RoundsToBf16AndAgreesBitwise) {
  auto comm = make(GetParam(), DType::bf16);
  const int rank = context().world_rank();
  const int size = context().world_size();
  // The largest count takes three shared-memory rounds, two of them timed by StoreChoice,
  // which always tries plain stores first and streaming ones second: both conversions run.
  for (std::size_t count : {std::size_t{3}, std::size_t{10007}, 4 * kRoundF32 + 3}) {
    Buffer buf(DType::f32, count);
    for (std::size_t i = 0; i < count; ++i) buf.set(i, rough_value(DType::f32, rank, i));
    comm->allreduce_sum(buf.data(), count, DType::f32);
    double worst = 0;
    std::size_t not_bf16 = 0;
    for (std::size_t i = 0; i < count; ++i) {
      double ref = 0;
      for (int r = 0; r < size; ++r) ref += static_cast<float>(rough_value(DType::f32, r, i));
      worst = std::max(worst, test::rel_error(buf.get(i), ref));
      const auto v = static_cast<float>(buf.get(i));
      not_bf16 += bf16_to_float(float_to_bf16(v)) != v;
    }
    EXPECT_LE(worst, test::kTolHalf) << "count " << count;
    EXPECT_EQ(not_bf16, 0u) << "count " << count << ": results did not travel as bf16";
    EXPECT_TRUE(buf.guards_intact());
    EXPECT_TRUE(same_on_all_ranks(buf.hash())) << "count " << count << ": ranks disagree bitwise";
  }
  // Integers small enough for bf16 stay exact; other dtypes travel as themselves.
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::bf16}) check_exact_sum(*comm, dtype, 65537);
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A thread spinning on the core the calling thread runs on, both pinned there until stop():
// the compute thread that a communication thread shares its core with.
class BusyNeighbour {
 public:
  BusyNeighbour() {
    pthread_getaffinity_np(pthread_self(), sizeof saved_, &saved_);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    thread_ = std::thread([this, one] {
      pthread_setaffinity_np(pthread_self(), sizeof one, &one);
      const double start = thread_cpu_seconds();
      running_.store(true);
      while (!stop_.load(std::memory_order_relaxed)) {
      }
      cpu_seconds_ = thread_cpu_seconds() - start;
    });
    while (!running_.load()) std::this_thread::yield();
  }
  ~BusyNeighbour() { stop(); }
  BusyNeighbour(const BusyNeighbour&) = delete;
  BusyNeighbour& operator=(const BusyNeighbour&) = delete;

  // Ends the spinning and the pinning; returns the CPU time the spinner got.
  double stop() {
    if (thread_.joinable()) {
      stop_.store(true);
      thread_.join();
      pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_);
    }
    return cpu_seconds_;
  }

 private:
  cpu_set_t saved_;
  std::atomic<bool> running_{false}, stop_{false};
  double cpu_seconds_ = 0;
  std::thread thread_;
};

// A rank waiting in allreduce for a late peer must leave its core to the busy thread beside
// it: a waiter that spins takes about half the core, one that yields or sleeps almost none.
TEST_P(RingPathTest, WaitingYieldsTheCoreToABusyThread) {
  auto comm = make(GetParam());
  constexpr double kLate = 0.3;
  Buffer buf(DType::f32, 1009);
  for (std::size_t i = 0; i < buf.count(); ++i) buf.set(i, 1.0);
  MPI_Barrier(MPI_COMM_WORLD);
  if (context().world_rank() == 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kLate));
    comm->allreduce_sum(buf.data(), buf.count(), DType::f32);
  } else {
    BusyNeighbour busy;
    const double start = thread_cpu_seconds();
    comm->allreduce_sum(buf.data(), buf.count(), DType::f32);
    const double waiter = thread_cpu_seconds() - start;
    const double spinner = busy.stop();
    EXPECT_LT(waiter, 0.5 * spinner) << "the waiter took " << waiter << " s of CPU, the busy thread beside it "
                                     << spinner << " s";
  }
  EXPECT_EQ(buf.get(0), context().world_size());
}

// Every rank's caller shares its core with a busy thread: sums stay exact (each wait has to
// get the core back from the spinner).
TEST_P(RingPathTest, ExactWithABusyThreadOnEveryCore) {
  auto comm = make(GetParam());
  BusyNeighbour busy;
  for (std::size_t count : {std::size_t{1}, std::size_t{1009}, kRoundF32 + 7})
    check_exact_sum(*comm, DType::f32, count);
}

// Through shared memory a rank that waits long for a peer sleeps in the kernel (a futex)
// after a short spell of polling: with no other thread to hand the core to, a waiter that
// yields keeps it busy the whole wait (before: about all of 0.3 s).
TEST(SharedMemoryWait, AWaiterForALatePeerSleeps) {
  auto comm = make(kShm);
  if (comm->name() != kShm.comm_name) GTEST_SKIP() << "no shared memory for the ring here: " << comm->name();
  constexpr double kLate = 0.3;
  Buffer buf(DType::f32, 1009);
  for (std::size_t i = 0; i < buf.count(); ++i) buf.set(i, 1.0);
  MPI_Barrier(MPI_COMM_WORLD);
  if (context().world_rank() == 0) std::this_thread::sleep_for(std::chrono::duration<double>(kLate));
  const double start = thread_cpu_seconds();
  comm->allreduce_sum(buf.data(), buf.count(), DType::f32);
  const double cpu = thread_cpu_seconds() - start;
  if (context().world_rank() != 0) EXPECT_LT(cpu, 0.1 * kLate) << "the waiter took " << cpu << " s of CPU";
  EXPECT_EQ(buf.get(0), context().world_size());
}

// Ranks arriving late in turn, by random spells around the polling time, so that waits end in
// every way (met while polling, woken from the futex, the value
// raised just as the waiter goes to sleep): every call completes and is exact. A lost wake-up
// would hang here until ctest's timeout.
TEST(SharedMemoryWait, RanksArrivingLateInTurnNeverMissAWakeUp) {
  auto comm = make(kShm);
  if (comm->name() != kShm.comm_name) GTEST_SKIP() << "no shared memory for the ring here: " << comm->name();
  std::mt19937 random(static_cast<unsigned>(context().world_rank()) + 1u);
  std::uniform_int_distribution<int> late_us(0, 200);
  for (int call = 0; call < 1500; ++call) {
    if (random() % 2 == 0) std::this_thread::sleep_for(std::chrono::microseconds(late_us(random)));
    check_exact_sum(*comm, DType::f32, call % 3 == 0 ? kRoundF32 + 7 : 1009);
    if (::testing::Test::HasFailure()) return;
  }
}

// StoreChoice (shm_allreduce.hpp) on made-up timings: both kinds timed first, then plain
// unless streaming is more than twice as fast, the other kind timed every 64th phase.
TEST(StoreChoice, TimesBothThenKeepsTheClearlyFasterAndProbesTheOther) {
  using comm::Store;
  using std::chrono::nanoseconds;
  comm::StoreChoice choice;
  EXPECT_EQ(choice.next(), Store::plain);
  choice.record(Store::plain, 1000, nanoseconds(300));  // 0.3 ns/B
  EXPECT_EQ(choice.next(), Store::stream);
  choice.record(Store::stream, 1000, nanoseconds(200));  // faster, but not twice
  EXPECT_EQ(choice.next(), Store::plain);
  choice.record(Store::plain, 1000, nanoseconds(900));  // far cores: estimate 0.6 > 2 x 0.2
  int streamed = 0;
  for (int i = 0; i < 64; ++i) {
    const Store s = choice.next();
    streamed += s == Store::stream;
    choice.record(s, 1000, nanoseconds(s == Store::stream ? 200 : 900));
  }
  EXPECT_EQ(streamed, 63) << "streams while plain is slower, times plain once per 64";
  for (int i = 0; i < 4; ++i) choice.record(Store::plain, 1000, nanoseconds(100));  // near again
  EXPECT_EQ(choice.next(), Store::plain);
}

INSTANTIATE_TEST_SUITE_P(Paths, RingPathTest, ::testing::Values(kShm, kP2p),
                         [](const auto& info) { return std::string(info.param.label); });

// --- reduce_scatter_sum and allgather ---

// Signed values of magnitudes 2^-10 .. 2^10 that differ per rank: partial sums cancel and
// round differently in every association, so a sum formed in another order shows.
double mixed_value(int rank, std::size_t i) {
  const std::uint64_t bits = splitmix((static_cast<std::uint64_t>(rank) << 40) ^ i ^ 0x5eedull);
  const double mantissa = 1.0 + static_cast<double>(bits >> 12) * 0x1.0p-52;
  const int exponent = static_cast<int>(bits % 21) - 10;
  return ((bits >> 11) & 1 ? -1.0 : 1.0) * std::ldexp(mantissa, exponent);
}

// Relative rounding error of one reduction step in this dtype on this wire, with margin.
double step_error(DType dtype, DType wire) {
  if (dtype == DType::bf16 || wire == DType::bf16) return 0x1.0p-7;
  if (dtype == DType::f16) return 0x1.0p-10;
  return 0x1.0p-22;
}

struct ShardedCase {
  Path path;
  DType dtype;
  DType wire;
};
void PrintTo(const ShardedCase& c, std::ostream* os) {
  *os << c.path.label << "_" << dtype_name(c.dtype) << "_wire_" << dtype_name(c.wire);
}

class ShardedTest : public ::testing::TestWithParam<ShardedCase> {};

// Counts: empty, fewer elements than ranks, under one shard unit, units plus a remainder, and
// several shared-memory rounds (700,000 f32 is 2.7 slots).
std::vector<std::size_t> sharded_counts() {
  const auto w = static_cast<std::size_t>(context().world_size());
  return {700000, 0, 1, w - 1, 63, 64 * w + 5};
}

// reduce_scatter_sum leaves on each rank's shard bitwise what allreduce_sum gives; the
// allgather of those shards then reproduces allreduce_sum's whole result on every rank, which
// is bitwise the same everywhere and close to the exact sum.
TEST_P(ShardedTest, ReduceScatterIsAllreduceOnTheShardAndAllgatherCompletesIt) {
  const ShardedCase& c = GetParam();
  auto comm = make(c.path, c.wire);
  const int rank = context().world_rank();
  const int size = context().world_size();
  for (std::size_t count : sharded_counts()) {
    Buffer reduced(c.dtype, count), scattered(c.dtype, count), input(c.dtype, 1);
    for (std::size_t i = 0; i < count; ++i) {
      reduced.set(i, mixed_value(rank, i));
      scattered.set(i, mixed_value(rank, i));
    }
    comm->allreduce_sum(reduced.data(), count, c.dtype);
    comm->reduce_scatter_sum(scattered.data(), count, c.dtype);
    const ArenaRange own = shard_range(static_cast<std::int64_t>(count), size, rank);
    const auto begin = static_cast<std::size_t>(own.offset), end = static_cast<std::size_t>(own.end());
    EXPECT_TRUE(scattered.same_bits(reduced, begin, end))
        << "count " << count << ": own shard [" << begin << ", " << end << ") differs from allreduce";
    comm->allgather(scattered.data(), count, c.dtype);
    EXPECT_TRUE(scattered.same_bits(reduced, 0, count)) << "count " << count << ": allgather of the shards";
    EXPECT_TRUE(same_on_all_ranks(reduced.hash())) << "count " << count << ": ranks disagree bitwise";
    EXPECT_TRUE(reduced.guards_intact() && scattered.guards_intact()) << "count " << count;
    std::size_t far = 0;
    for (std::size_t i = 0; i < count; ++i) {
      double exact = 0, magnitude = 0;
      for (int r = 0; r < size; ++r) {
        input.set(0, mixed_value(r, i));
        exact += input.get(0);
        magnitude += std::abs(input.get(0));
      }
      if (std::abs(reduced.get(i) - exact) > size * step_error(c.dtype, c.wire) * magnitude && far++ == 0)
        ADD_FAILURE() << "count " << count << ": element " << i << " is " << reduced.get(i) << ", exact " << exact;
    }
    EXPECT_EQ(far, 0u) << "count " << count;
  }
}

// allgather copies bits: every element ends as its shard's owner wrote it (f32 values with
// low mantissa bits that a bf16 wire would drop, NaN payloads), whatever the others held.
TEST_P(ShardedTest, AllgatherCopiesEveryShardBitForBit) {
  const ShardedCase& c = GetParam();
  auto comm = make(c.path, c.wire);
  const int rank = context().world_rank();
  const int size = context().world_size();
  auto pattern = [](int owner, std::size_t i) { return splitmix((static_cast<std::uint64_t>(owner) << 48) ^ i); };
  for (DType dtype : {c.dtype, DType::u8, DType::f64}) {
    for (std::size_t count : sharded_counts()) {
      Buffer data(dtype, count), expected(dtype, count);
      for (int q = 0; q < size; ++q) {
        const ArenaRange shard = shard_range(static_cast<std::int64_t>(count), size, q);
        for (auto i = static_cast<std::size_t>(shard.offset); i < static_cast<std::size_t>(shard.end()); ++i) {
          expected.set_bits(i, pattern(q, i));
          data.set_bits(i, q == rank ? pattern(q, i) : ~pattern(q, i) ^ static_cast<std::uint64_t>(rank));
        }
      }
      comm->allgather(data.data(), count, dtype);
      EXPECT_TRUE(data.same_bits(expected, 0, count)) << dtype_name(dtype) << " count " << count;
      EXPECT_TRUE(data.guards_intact()) << dtype_name(dtype) << " count " << count;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    PathsDtypesWires, ShardedTest,
    ::testing::Values(ShardedCase{kShm, DType::f32, DType::f32}, ShardedCase{kShm, DType::f32, DType::bf16},
                      ShardedCase{kShm, DType::bf16, DType::f32}, ShardedCase{kShm, DType::f16, DType::f32},
                      ShardedCase{kP2p, DType::f32, DType::f32}, ShardedCase{kP2p, DType::f32, DType::bf16},
                      ShardedCase{kP2p, DType::bf16, DType::f32}, ShardedCase{kP2p, DType::f16, DType::f32},
                      ShardedCase{kMpi, DType::f32, DType::f32}, ShardedCase{kMpi, DType::bf16, DType::f32},
                      ShardedCase{kMpi, DType::f16, DType::f32}),
    [](const auto& info) {
      return std::string(info.param.path.label) + "_" + std::string(dtype_name(info.param.dtype)) + "_wire_" +
             std::string(dtype_name(info.param.wire));
    });

TEST(ShardedErrors, ReduceScatterRejectsU8AlikeOnEveryRank) {
  const std::string expected = "reduce_scatter_sum: dtype u8 not supported (supported: f32, f64, bf16, f16, i32)";
  for (const Path& path : {kShm, kP2p, kMpi}) {
    auto comm = make(path);
    std::vector<std::uint8_t> bytes(16, 1);
    EXPECT_EQ(message_of<CommError>([&] { comm->reduce_scatter_sum(bytes.data(), bytes.size(), DType::u8); }),
              expected);
    EXPECT_EQ(message_of<CommError>([&] { comm->reduce_scatter_sum(nullptr, 0, DType::u8); }), expected);
    check_exact_sum(*comm, DType::f32, 5);  // nothing was left in flight
  }
}

TEST(ShardedSingleRank, BothLeaveTheDataAsItIs) {
  for (AllreduceAlgo algo : {AllreduceAlgo::ring, AllreduceAlgo::mpi}) {
    auto self = make_mpi_self_communicator(algo);
    std::vector<float> data{1.5f, -2.25f, 3.0f};
    self->reduce_scatter_sum(data.data(), data.size(), DType::f32);
    self->allgather(data.data(), data.size(), DType::f32);
    EXPECT_EQ(data, (std::vector<float>{1.5f, -2.25f, 3.0f}));
  }
}

TEST(Broadcast, CopiesFromNonZeroRootForOddSizes) {
  auto comm = make_mpi_communicator(context(), AllreduceAlgo::ring);
  const int rank = context().world_rank();
  const int size = context().world_size();
  for (int root : {size - 1, 1}) {
    for (std::size_t bytes :
         {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001}, (std::size_t{3} << 20) + 5}) {
      auto pattern = [&](std::size_t i) {
        return static_cast<unsigned char>((i * 31 + static_cast<std::size_t>(root) * 7 + 1) & 0xff);
      };
      std::vector<unsigned char> data(bytes + 1, 0xEE);  // last byte: guard, never sent
      if (rank == root)
        for (std::size_t i = 0; i < bytes; ++i) data[i] = pattern(i);
      comm->broadcast(data.data(), bytes, root);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < bytes; ++i) wrong += data[i] != pattern(i);
      EXPECT_EQ(wrong, 0u) << "root " << root << ", " << bytes << " bytes";
      EXPECT_EQ(data[bytes], 0xEE) << "root " << root << ", " << bytes << " bytes: wrote past the end";
    }
  }
  comm->broadcast(nullptr, 0, 0);
}

TEST(Broadcast, RootOutOfRangeIsACommError) {
  auto comm = make_mpi_communicator(context(), AllreduceAlgo::mpi);
  char byte = 0;
  EXPECT_THROW(comm->broadcast(&byte, 1, context().world_size()), CommError);
  EXPECT_THROW(comm->broadcast(&byte, 1, -1), CommError);
}

TEST(Barrier, WaitsForTheLastRank) {
  auto comm = make_mpi_communicator(context(), AllreduceAlgo::ring);
  constexpr double kDelay = 0.3;
  MPI_Barrier(MPI_COMM_WORLD);  // line the ranks up before timing
  const double start = MPI_Wtime();
  if (context().world_rank() == 0) std::this_thread::sleep_for(std::chrono::duration<double>(kDelay));
  comm->barrier();
  const double waited = MPI_Wtime() - start;
  // Everyone, rank 0 included, leaves the barrier only after rank 0 arrived; the margin
  // absorbs a late start of this rank under oversubscription.
  EXPECT_GE(waited, kDelay / 2) << "rank " << context().world_rank() << " left the barrier early";
}

TEST(Communicators, SeveralCoexistAndOutliveEachOther) {
  auto ring = make_mpi_communicator(context(), AllreduceAlgo::ring);
  auto mpi = make_mpi_communicator(context(), AllreduceAlgo::mpi);
  check_exact_sum(*ring, DType::f32, 1009);
  check_exact_sum(*mpi, DType::bf16, 1009);
  ring.reset();
  check_exact_sum(*mpi, DType::f16, 65537);
}

}  // namespace
}  // namespace ringtrain
