// The MPI gradient path of GPU ranks without NCCL (GpuBackend::stage_through_host) at 2 and 4
// ranks, every rank on the one GPU there is: device buffers allreduced, reduce-scattered,
// allgathered and broadcast through pinned host memory give the host collective's values, the
// staging buffer grows to the largest collective, and the communicator says it takes device
// memory and calls MPI. Skips (on every rank alike) without a GPU.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "cuda/gpu_backend.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/shard.hpp"
#include "ringtrain/runtime/context.hpp"

namespace ringtrain {
namespace {

// Whether every rank sees a GPU (the same answer everywhere, so all skip or none).
bool every_rank_has_a_gpu() {
  int mine = test::have_gpu() ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

TEST(HostStagedCommunicator, ReducesGathersAndBroadcastsDeviceBuffers) {
  if (!every_rank_has_a_gpu()) GTEST_SKIP() << "no CUDA device on some rank";
  Context& ctx = test::context();
  ctx.bind(Device::cuda, 1);
  auto comm = gpu("test").stage_through_host(make_mpi_communicator(ctx, AllreduceAlgo::ring));
  EXPECT_TRUE(comm->device_memory());
  EXPECT_TRUE(comm->calls_mpi());
  const int rank = comm->rank(), world = comm->size();
  constexpr std::size_t kCount = 100'003;
  std::vector<float> values(kCount);
  for (std::size_t i = 0; i < kCount; ++i) values[i] = static_cast<float>((i % 7) + 1) * static_cast<float>(rank + 1);
  auto buffer = test::DeviceBuffer::of(values);
  comm->allreduce_sum(buffer.get(), kCount, DType::f32);
  const std::vector<float> summed = buffer.read<float>();
  const float ranks_sum = static_cast<float>(world) * static_cast<float>(world + 1) / 2.0f;  // 1 + ... + world
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < kCount; ++i)
    if (summed[i] != static_cast<float>((i % 7) + 1) * ranks_sum) ++wrong;
  EXPECT_EQ(wrong, 0u) << "of " << kCount;
  EXPECT_GE(comm->staging_bytes(), kCount * sizeof(float));

  // ZeRO's halves: this rank's shard of the sums, then every shard spread to every rank.
  const ArenaRange own = shard_range(static_cast<std::int64_t>(kCount), world, rank);
  auto scattered = test::DeviceBuffer::of(values);
  comm->reduce_scatter_sum(scattered.get(), kCount, DType::f32);
  std::vector<float> shards = scattered.read<float>();
  for (std::int64_t i = own.offset; i < own.end(); ++i)
    ASSERT_EQ(shards[static_cast<std::size_t>(i)], summed[static_cast<std::size_t>(i)]) << "element " << i;
  for (std::size_t i = 0; i < kCount; ++i)
    if (static_cast<std::int64_t>(i) < own.offset || static_cast<std::int64_t>(i) >= own.end()) shards[i] = -1.0f;
  auto gathered = test::DeviceBuffer::of(shards);
  comm->allgather(gathered.get(), kCount, DType::f32);
  EXPECT_EQ(gathered.read<float>(), summed);

  std::vector<std::int32_t> word{rank == world - 1 ? 42 : -1};
  auto small = test::DeviceBuffer::of(word);
  comm->broadcast(small.get(), sizeof(std::int32_t), world - 1);
  EXPECT_EQ(small.read<std::int32_t>(), std::vector<std::int32_t>{42});
}

}  // namespace
}  // namespace ringtrain
