// MemoryPool over CUDA device memory: stream-ordered reuse with real kernels' memory, and an
// absurd request reported as OutOfMemory without leaving a CUDA error behind. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/gpu_backend.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/memory_pool.hpp"

namespace ringtrain {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

TEST(CudaMemoryPool, AllocatesAndReusesOnAStream) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto memory = gpu("test").make_memory();
  const MemoryInfo info = memory->info();
  EXPECT_GT(info.total, 0u);
  EXPECT_LE(info.free, info.total);
  EXPECT_EQ(memory->name().rfind("cuda:", 0), 0u);

  MemoryPool pool(*memory);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreate(&stream));
  void* first = pool.allocate(kMiB, stream);
  CUDA_OK(cudaMemsetAsync(first, 1, kMiB, stream));
  pool.free(first);
  void* second = pool.allocate(kMiB / 2, stream);  // ordered after the memset on the same stream
  EXPECT_EQ(second, first);
  CUDA_OK(cudaMemsetAsync(second, 7, kMiB / 2, stream));
  std::vector<unsigned char> host(kMiB / 2);
  CUDA_OK(cudaMemcpyAsync(host.data(), second, host.size(), cudaMemcpyDeviceToHost, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  EXPECT_EQ(host.front(), 7);
  EXPECT_EQ(host.back(), 7);

  const PoolStats s = pool.stats();
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.reserved, 2 * kMiB);
  pool.free(second);
  pool.empty_cache();
  EXPECT_EQ(pool.stats().reserved, 0u);
  CUDA_OK(cudaStreamDestroy(stream));
}

TEST(CudaMemoryPool, AnAbsurdRequestIsOutOfMemory) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto memory = gpu("test").make_memory();
  MemoryPool pool(*memory);
  try {
    pool.allocate(std::size_t{1} << 50);  // 1 PiB
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of memory on cuda:"), std::string::npos) << m;
    EXPECT_NE(m.find("requested 1.0 PiB"), std::string::npos) << m;
    EXPECT_NE(m.find("total"), std::string::npos) << m;
    EXPECT_NE(m.find("lower train.batch_size"), std::string::npos) << m;
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // out of memory left no error behind
  void* ptr = pool.allocate(kMiB);
  EXPECT_NE(ptr, nullptr);
  pool.free(ptr);
}

}  // namespace
}  // namespace ringtrain
