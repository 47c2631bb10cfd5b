// The NCCL backend under mpirun. Without a GPU: the unique-id exchange over MPI, nccl_version,
// and a clear creation error on every rank (no crash, no hang). With one GPU per node-local
// rank: exact allreduce sums on device buffers, reduce-scatter and allgather on the shard layout,
// broadcast, barrier, and inputs ordered by a mark (mark_inputs_ready) for a collective run from
// another thread. Without NCCL: NotCompiled.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <regex>
#include <thread>
#include <string>
#include <vector>

#include "comm/nccl_unique_id.hpp"
#include "cuda/gpu_backend.hpp"
#include "ringtrain/comm/nccl.hpp"
#include "ringtrain/comm/shard.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/dtype.hpp"
#include "support/test_context.hpp"

// Set by tests/mpi/comm/CMakeLists.txt when the real backend is built; the device-buffer
// tests below need cuda_runtime.h, which a build without CUDA cannot include.
#ifndef RINGTRAIN_TEST_WITH_NCCL
#define RINGTRAIN_TEST_WITH_NCCL 0
#endif
#if RINGTRAIN_TEST_WITH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace ringtrain {

void PrintTo(DType dtype, std::ostream* os) { *os << dtype_name(dtype); }

namespace {

using test::context;

constexpr bool kNcclCompiled = RINGTRAIN_TEST_WITH_NCCL != 0;

bool all_ranks(bool mine) {
  int local = mine ? 1 : 0, global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return global == 1;
}

int visible_gpus() {
  const GpuBackend* gpu = compiled_gpu_backend();
  return gpu != nullptr ? gpu->device_count() : 0;
}

// The same answer on every rank (a rank skipping alone would leave peers in a collective).
bool every_rank_has_a_gpu() { return all_ranks(visible_gpus() >= context().local_size()); }
bool no_rank_has_a_gpu() { return all_ranks(visible_gpus() == 0); }

TEST(NcclVersion, IsTheLibraryVersion) {
  if (!kNcclCompiled) {
    try {
      nccl_version();
      FAIL() << "expected NotCompiled";
    } catch (const NotCompiled& e) {
      EXPECT_NE(std::string(e.what()).find("RINGTRAIN_WITH_CUDA=OFF"), std::string::npos) << e.what();
    }
    return;
  }
  const std::string version = nccl_version();
  std::smatch m;
  ASSERT_TRUE(std::regex_match(version, m, std::regex(R"((\d+)\.(\d+)\.(\d+))"))) << version;
#if RINGTRAIN_TEST_WITH_NCCL
  EXPECT_EQ(std::stoi(m[1]), NCCL_MAJOR) << version;  // the library we run is the one we built against
  EXPECT_EQ(std::stoi(m[2]), NCCL_MINOR) << version;
#endif
  EXPECT_GE(std::stoi(m[2]), 14) << version;
}

TEST(NcclUniqueId, IdenticalOnEveryRankAndFreshPerExchange) {
  const Context& ctx = context();
  if (!kNcclCompiled) {
    EXPECT_THROW(comm::exchange_nccl_unique_id(ctx), NotCompiled);
    return;
  }
  const comm::NcclUniqueIdBytes first = comm::exchange_nccl_unique_id(ctx);
  const comm::NcclUniqueIdBytes second = comm::exchange_nccl_unique_id(ctx);
  for (const comm::NcclUniqueIdBytes* id : {&first, &second}) {
    std::vector<char> all(id->size() * static_cast<std::size_t>(ctx.world_size()));
    ASSERT_EQ(MPI_Allgather(id->data(), static_cast<int>(id->size()), MPI_BYTE, all.data(),
                            static_cast<int>(id->size()), MPI_BYTE, MPI_COMM_WORLD),
              MPI_SUCCESS);
    for (int r = 0; r < ctx.world_size(); ++r)
      EXPECT_EQ(std::memcmp(all.data() + static_cast<std::size_t>(r) * id->size(), id->data(), id->size()), 0)
          << "rank " << r << "'s id differs from rank " << ctx.world_rank() << "'s";
    EXPECT_TRUE(std::any_of(id->begin(), id->end(), [](char c) { return c != 0; })) << "id is all zeros";
  }
  EXPECT_NE(first, second) << "two exchanges gave the same id";
}

TEST(NcclCommunicator, WithoutGpuCreationFailsClearlyOnEveryRank) {
  const Context& ctx = context();
  if (kNcclCompiled && !no_rank_has_a_gpu()) GTEST_SKIP() << "a GPU is visible";
  const auto start = std::chrono::steady_clock::now();
  try {
    make_nccl_communicator(ctx, NcclOptions{});
    FAIL() << "expected an error";
  } catch (const NotCompiled& e) {
    EXPECT_FALSE(kNcclCompiled) << e.what();
    EXPECT_NE(std::string(e.what()).find("RINGTRAIN_WITH_CUDA=OFF"), std::string::npos) << e.what();
  } catch (const Error& e) {
    EXPECT_TRUE(kNcclCompiled) << e.what();
    if (ctx.world_rank() == 0) std::printf("creation error (expected): %s\n", e.what());
    // Every rank reports rank 0's failure (all agree before anyone enters NCCL init).
    EXPECT_NE(std::string(e.what()).find("nccl: rank 0 of"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no CUDA device visible"), std::string::npos) << e.what();
  }
  // Every rank is back and MPI still works; nothing waited for a timeout.
  EXPECT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(NcclCommunicator, BadOptionsOnOneRankFailEveryRank) {
  const Context& ctx = context();
  if (!kNcclCompiled) GTEST_SKIP() << "built without NCCL (covered by the NotCompiled tests)";
  const bool gpus = every_rank_has_a_gpu();
  NcclOptions options;
  const int bad_rank = ctx.world_size() - 1;
  if (ctx.world_rank() == bad_rank) options.timeout_s = 0;
  try {
    make_nccl_communicator(ctx, options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    // Without a GPU rank 0 fails first (no device); with GPUs only the bad rank does.
    if (gpus) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("nccl: rank {} of", bad_rank)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("timeout_s must be a positive"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
}

#if RINGTRAIN_TEST_WITH_NCCL

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

// `count` elements of `dtype` on the device with one guard element on each side, so a write
// past either end of the reduced range is caught.
class DeviceBuffer {
 public:
  DeviceBuffer(DType dtype, std::size_t count) : dtype_(dtype), count_(count) {
    const std::size_t bytes = (count + 2) * dtype_size(dtype);
    EXPECT_EQ(cudaMalloc(&base_, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(base_, kGuard, bytes), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() { return static_cast<std::byte*>(base_) + dtype_size(dtype_); }
  // Host image including the guards.
  std::vector<std::byte> read() const {
    std::vector<std::byte> host((count_ + 2) * dtype_size(dtype_));
    EXPECT_EQ(cudaMemcpy(host.data(), base_, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  void write(const std::vector<std::byte>& interior) {
    EXPECT_EQ(cudaMemcpy(data(), interior.data(), interior.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }

  static constexpr int kGuard = 0x5a;

 private:
  DType dtype_;
  std::size_t count_;
  void* base_ = nullptr;
};

void store(std::byte* p, DType dtype, double v) {
  switch (dtype) {
    case DType::f32: {
      const float x = static_cast<float>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case DType::f64: std::memcpy(p, &v, 8); break;
    case DType::bf16: {
      const auto x = float_to_bf16(static_cast<float>(v));
      std::memcpy(p, &x, 2);
      break;
    }
    case DType::f16: {
      const auto x = float_to_f16(static_cast<float>(v));
      std::memcpy(p, &x, 2);
      break;
    }
    case DType::i32: {
      const auto x = static_cast<std::int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case DType::u8: {
      const auto x = static_cast<std::uint8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
  }
}

// Small integers: every partial sum over up to 64 ranks is exact in every dtype (bf16 holds
// integers up to 256 exactly), so NCCL's summation order cannot change the result.
double value(int rank, std::size_t i) {
  return static_cast<double>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 3) % 9) - 4);
}

std::vector<std::byte> image(DType dtype, std::size_t count, int rank_or_sum, int world) {
  std::vector<std::byte> out(count * dtype_size(dtype));
  for (std::size_t i = 0; i < count; ++i) {
    double v = 0;
    if (rank_or_sum >= 0) {
      v = value(rank_or_sum, i);
    } else {
      for (int r = 0; r < world; ++r) v += value(r, i);
    }
    store(out.data() + i * dtype_size(dtype), dtype, v);
  }
  return out;
}

class NcclOnGpu : public ::testing::TestWithParam<std::tuple<DType, std::size_t>> {
 protected:
  void SetUp() override {
    if (!every_rank_has_a_gpu()) GTEST_SKIP() << "needs one CUDA device per node-local rank";
  }
};

TEST_P(NcclOnGpu, AllreduceIsTheExactSum) {
  const auto [dtype, count] = GetParam();
  const Context& ctx = context();
  auto comm = make_nccl_communicator(ctx, NcclOptions{.timeout_s = 120});
  ASSERT_EQ(comm->name(), "nccl");
  ASSERT_EQ(comm->size(), ctx.world_size());
  DeviceBuffer buffer(dtype, count);
  buffer.write(image(dtype, count, ctx.world_rank(), ctx.world_size()));
  comm->allreduce_sum(buffer.data(), count, dtype);
  const std::vector<std::byte> got = buffer.read();
  const std::vector<std::byte> want = image(dtype, count, -1, ctx.world_size());
  const std::size_t es = dtype_size(dtype);
  EXPECT_EQ(std::memcmp(got.data() + es, want.data(), want.size()), 0) << "sum differs from the exact sum";
  for (std::size_t b = 0; b < es; ++b) {
    EXPECT_EQ(static_cast<int>(got[b]), DeviceBuffer::kGuard) << "wrote before the buffer";
    EXPECT_EQ(static_cast<int>(got[got.size() - 1 - b]), DeviceBuffer::kGuard) << "wrote past the buffer";
  }
}

// ZeRO's halves on the shard layout: after reduce_scatter_sum this rank's shard holds the exact
// sums; allgather then spreads every rank's shard bit for bit. Both at the given count (which
// needs the padded staging buffer unless it is size x the shard unit) and at 256 x size elements
// (run in place), with guards around the buffer.
TEST_P(NcclOnGpu, ReduceScatterKeepsTheShardsSumsAndAllgatherSpreadsThem) {
  const auto [dtype, param_count] = GetParam();
  const Context& ctx = context();
  auto comm = make_nccl_communicator(ctx, NcclOptions{.timeout_s = 120});
  const std::size_t es = dtype_size(dtype);
  for (const std::size_t count : {param_count, std::size_t{256} * static_cast<std::size_t>(ctx.world_size())}) {
    SCOPED_TRACE(count);
    const ArenaRange own = shard_range(static_cast<std::int64_t>(count), ctx.world_size(), ctx.world_rank());
    const std::vector<std::byte> sums = image(dtype, count, -1, ctx.world_size());
    DeviceBuffer buffer(dtype, count);
    buffer.write(image(dtype, count, ctx.world_rank(), ctx.world_size()));
    comm->reduce_scatter_sum(buffer.data(), count, dtype);
    std::vector<std::byte> got = buffer.read();
    const auto at = static_cast<std::size_t>(own.offset) * es;
    EXPECT_EQ(std::memcmp(got.data() + es + at, sums.data() + at, static_cast<std::size_t>(own.count) * es), 0)
        << "the shard's sums differ from the exact sums";

    std::vector<std::byte> mine(count * es, std::byte{0x77});  // only this rank's shard is right
    std::memcpy(mine.data() + at, sums.data() + at, static_cast<std::size_t>(own.count) * es);
    buffer.write(mine);
    comm->allgather(buffer.data(), count, dtype);
    got = buffer.read();
    EXPECT_EQ(std::memcmp(got.data() + es, sums.data(), sums.size()), 0) << "the gathered buffer differs";
    for (std::size_t b = 0; b < es; ++b) {
      EXPECT_EQ(static_cast<int>(got[b]), DeviceBuffer::kGuard) << "wrote before the buffer";
      EXPECT_EQ(static_cast<int>(got[got.size() - 1 - b]), DeviceBuffer::kGuard) << "wrote past the buffer";
    }
  }
  EXPECT_GT(comm->staging_bytes(), 0u);  // the counts above that are not size x unit were staged
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, NcclOnGpu,
    ::testing::Values(std::tuple{DType::f32, std::size_t{1}}, std::tuple{DType::f32, std::size_t{1'000'003}},
                      std::tuple{DType::bf16, std::size_t{1}}, std::tuple{DType::bf16, std::size_t{262'147}},
                      std::tuple{DType::f16, std::size_t{4099}}, std::tuple{DType::f64, std::size_t{4099}},
                      std::tuple{DType::i32, std::size_t{4099}}));

TEST(NcclOnGpuOps, BroadcastBarrierAndErrors) {
  if (!every_rank_has_a_gpu()) GTEST_SKIP() << "needs one CUDA device per node-local rank";
  const Context& ctx = context();
  auto comm = make_nccl_communicator(ctx, NcclOptions{.timeout_s = 120});
  const int root = ctx.world_size() - 1;
  const std::size_t bytes = 4099;
  std::vector<std::byte> pattern(bytes);
  for (std::size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<std::byte>((i * 31 + 7) & 0xff);
  DeviceBuffer buffer(DType::u8, bytes);
  if (ctx.world_rank() == root) buffer.write(pattern);
  comm->broadcast(buffer.data(), bytes, root);
  const auto got = buffer.read();
  EXPECT_EQ(std::memcmp(got.data() + 1, pattern.data(), bytes), 0);

  for (int i = 0; i < 3; ++i) comm->barrier();

  // Refused before any NCCL call, on every rank alike: the communicator stays usable.
  std::vector<float> host(16, 1.0f);
  try {
    comm->allreduce_sum(host.data(), host.size(), DType::f32);
    FAIL() << "expected CommError for a host pointer";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("not device memory"), std::string::npos) << e.what();
  }
  EXPECT_THROW(comm->allreduce_sum(buffer.data(), 1, DType::u8), CommError);
  EXPECT_THROW(comm->broadcast(buffer.data(), 1, ctx.world_size()), CommError);
  comm->allreduce_sum(buffer.data(), 0, DType::f32);  // no-op

  // Inputs written on the legacy default stream right before the call are seen (the comm
  // stream is non-blocking; the communicator orders it after the legacy stream).
  const std::size_t count = std::size_t{16} << 20;
  DeviceBuffer ints(DType::i32, count);
  CUDA_OK(cudaMemset(ints.data(), 0xff, count * 4));
  CUDA_OK(cudaMemsetAsync(ints.data(), 0x01, count * 4, cudaStreamLegacy));
  comm->allreduce_sum(ints.data(), count, DType::i32);
  const auto sums = ints.read();
  std::int32_t first = 0, last = 0;
  std::memcpy(&first, sums.data() + 4, 4);
  std::memcpy(&last, sums.data() + sums.size() - 8, 4);
  EXPECT_EQ(first, 0x01010101 * ctx.world_size());
  EXPECT_EQ(last, 0x01010101 * ctx.world_size());
}

TEST(NcclOnGpuOps, AMarkOrdersInputsOfABlockingStreamForAnotherThread) {
  if (!every_rank_has_a_gpu()) GTEST_SKIP() << "needs one CUDA device per node-local rank";
  const Context& ctx = context();
  auto comm = make_nccl_communicator(ctx, NcclOptions{.timeout_s = 120});
  // As in the training step: backward writes a bucket on the blocking compute stream, the
  // compute thread marks it, and the communication thread reduces it after the mark.
  cudaStream_t compute = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&compute, cudaStreamDefault));
  const std::size_t count = std::size_t{16} << 20;
  DeviceBuffer ints(DType::i32, count);
  CUDA_OK(cudaMemset(ints.data(), 0xff, count * 4));
  std::uint64_t tokens[2] = {0, 0};
  for (std::uint64_t& token : tokens) {
    CUDA_OK(cudaMemsetAsync(ints.data(), 0x02, count * 4, compute));
    token = comm->mark_inputs_ready();
    std::thread([&] { comm->allreduce_sum_after(token, ints.data(), count, DType::i32); }).join();
    const auto sums = ints.read();
    std::int32_t first = 0, last = 0;
    std::memcpy(&first, sums.data() + 4, 4);
    std::memcpy(&last, sums.data() + sums.size() - 8, 4);
    EXPECT_EQ(first, 0x02020202 * ctx.world_size());
    EXPECT_EQ(last, 0x02020202 * ctx.world_size());
  }
  EXPECT_GT(tokens[0], 0u);
  EXPECT_GT(tokens[1], tokens[0]);
  CUDA_OK(cudaStreamDestroy(compute));
}

#endif  // RINGTRAIN_TEST_WITH_NCCL

}  // namespace
}  // namespace ringtrain
