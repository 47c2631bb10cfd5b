// The MPI communicator under mpirun: allreduce (our ring and MPI_Allreduce, every summable
// dtype, counts around the world size, primes, a pipelined large count), broadcast, barrier,
// and the errors for an unsupported dtype and an unknown comm.allreduce value.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/dtype.hpp"
#include "support/test_context.hpp"

namespace ringtrain {

// Readable parameters in gtest's failure lines (found by ADL, hence outside the anonymous namespace).
void PrintTo(AllreduceAlgo algo, std::ostream* os) { *os << allreduce_algo_name(algo); }
void PrintTo(DType dtype, std::ostream* os) { *os << dtype_name(dtype); }

namespace {

using test::context;

// `count` elements of `dtype`, written and read as double, with one guard element on each
// side so that a write past either end of the reduced range is caught.
class Buffer {
 public:
  Buffer(DType dtype, std::size_t count)
      : dtype_(dtype), count_(count), bytes_((count + 2) * dtype_size(dtype)) {
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
  // FNV-1a over the reduced elements: equal on all ranks iff (almost surely) bitwise equal.
  std::uint64_t hash() const {
    std::uint64_t h = 1469598103934665603ull;
    const std::size_t e = dtype_size(dtype_);
    for (std::size_t b = e; b < e + count_ * e; ++b) h = (h ^ std::to_integer<std::uint64_t>(bytes_[b])) * 1099511628211ull;
    return h;
  }

 private:
  static constexpr unsigned char kGuard = 0xA5;
  template <typename T>
  static void store(std::byte* p, T v) { std::memcpy(p, &v, sizeof v); }
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

using Param = std::tuple<AllreduceAlgo, DType>;

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(allreduce_algo_name(std::get<0>(info.param))) + "_" +
         std::string(dtype_name(std::get<1>(info.param)));
}

class AllreduceTest : public ::testing::TestWithParam<Param> {
 protected:
  AllreduceAlgo algo() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }
};

TEST_P(AllreduceTest, ExactSumForAwkwardCounts) {
  auto comm = make_mpi_communicator(context(), algo());
  const std::size_t w = static_cast<std::size_t>(context().world_size());
  // Largest first, then smaller: later calls run on a scratch grown by an earlier one.
  for (std::size_t count : {std::size_t{65537}, std::size_t{0}, std::size_t{1}, w - 1, w, w + 1, std::size_t{7},
                            std::size_t{1009}})
    check_exact_sum(*comm, dtype(), count);
}

TEST_P(AllreduceTest, CountZeroDoesNothingAndLeavesPeersInStep) {
  auto comm = make_mpi_communicator(context(), algo());
  comm->allreduce_sum(nullptr, 0, dtype());
  Buffer buf(dtype(), 0);
  comm->allreduce_sum(buf.data(), 0, dtype());
  EXPECT_TRUE(buf.guards_intact());
  // A stray message from the empty calls would be received here and corrupt this sum.
  check_exact_sum(*comm, dtype(), 3);
}

TEST_P(AllreduceTest, RoughValuesMatchReferenceAndAgreeBitwise) {
  auto comm = make_mpi_communicator(context(), algo());
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
  auto comm = make_mpi_communicator(context(), algo());
  EXPECT_EQ(comm->name(), algo() == AllreduceAlgo::ring ? "mpi-ring" : "mpi-allreduce");
  EXPECT_EQ(comm->rank(), context().world_rank());
  EXPECT_EQ(comm->size(), context().world_size());
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, AllreduceTest,
                         ::testing::Combine(::testing::Values(AllreduceAlgo::ring, AllreduceAlgo::mpi),
                                            ::testing::Values(DType::f32, DType::f64, DType::bf16, DType::f16,
                                                              DType::i32)),
                         param_name);

// Large enough that every segment is cut into several 4 MiB slices plus a short one.
class LargeAllreduceTest : public AllreduceTest {};

TEST_P(LargeAllreduceTest, ExactSumOverManySlices) {
  auto comm = make_mpi_communicator(context(), algo());
  check_exact_sum(*comm, dtype(), std::size_t{4} * 1024 * 1024 + 3);
}

INSTANTIATE_TEST_SUITE_P(Large, LargeAllreduceTest,
                         ::testing::Combine(::testing::Values(AllreduceAlgo::ring, AllreduceAlgo::mpi),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         param_name);

TEST(AllreduceErrors, U8IsRejectedWithTheSupportedList) {
  const std::string expected = "allreduce: dtype u8 not supported (supported: f32, f64, bf16, f16, i32)";
  for (AllreduceAlgo algo : {AllreduceAlgo::ring, AllreduceAlgo::mpi}) {
    auto comm = make_mpi_communicator(context(), algo);
    std::vector<std::uint8_t> bytes(16, 1);
    EXPECT_EQ(message_of<CommError>([&] { comm->allreduce_sum(bytes.data(), bytes.size(), DType::u8); }), expected);
    EXPECT_EQ(message_of<CommError>([&] { comm->allreduce_sum(nullptr, 0, DType::u8); }), expected);
    // The rejected call must not have left anything in flight.
    check_exact_sum(*comm, DType::f32, 5);
  }
}

TEST(AllreduceAlgoConfig, ParsesKnownValuesAndNamesThem) {
  EXPECT_EQ(parse_allreduce_algo("ring"), AllreduceAlgo::ring);
  EXPECT_EQ(parse_allreduce_algo("mpi"), AllreduceAlgo::mpi);
  EXPECT_EQ(allreduce_algo_name(AllreduceAlgo::ring), "ring");
  EXPECT_EQ(allreduce_algo_name(AllreduceAlgo::mpi), "mpi");
}

TEST(AllreduceAlgoConfig, UnknownValueNamesKeyAndKnownValues) {
  EXPECT_EQ(message_of<ConfigError>([] { parse_allreduce_algo("nccl"); }),
            "comm.allreduce: unknown value 'nccl' (known: ring, mpi)");
  EXPECT_EQ(message_of<ConfigError>([] { parse_allreduce_algo("Ring", "train.comm.allreduce"); }),
            "train.comm.allreduce: unknown value 'Ring' (known: ring, mpi)");
  EXPECT_EQ(message_of<ConfigError>([] { parse_allreduce_algo(""); }),
            "comm.allreduce: unknown value '' (known: ring, mpi)");
}

TEST(Broadcast, CopiesFromNonZeroRootForOddSizes) {
  auto comm = make_mpi_communicator(context(), AllreduceAlgo::ring);
  const int rank = context().world_rank();
  const int size = context().world_size();
  for (int root : {size - 1, 1}) {
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001},
                              (std::size_t{3} << 20) + 5}) {
      auto pattern = [&](std::size_t i) { return static_cast<unsigned char>((i * 31 + static_cast<std::size_t>(root) * 7 + 1) & 0xff); };
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
