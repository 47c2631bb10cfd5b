// Reserved device memory (Tensor::reservable on the GPU, ZeRO stage 3's parameter arena): it
// starts zeroed; release_pages unmaps only the whole granules inside a range, so the elements
// around it keep their values, and the mapped bytes drop by what it released; commit_pages maps
// them again for writing; a pointer outside any reservation is an Error, not a crash. Skips
// without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::vector<float> read(const Tensor& t) {
  const Tensor host = to_host(t);
  return {host.f32(), host.f32() + host.numel()};
}

TEST(ReservedDeviceMemory, ReleasedGranulesComeBackOnCommitAndTheEdgesKeepTheirValues) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::int64_t n = std::int64_t{3} << 20;  // 12 MiB: several 2 MiB granules
  const Tensor t = Tensor::reservable(Shape{n}, DType::f32, Device::cuda);
  ASSERT_NE(t.raw(), nullptr);
  for (const float v : read(t)) ASSERT_EQ(v, 0.0f);
  Tensor pattern = Tensor::empty(Shape{n});
  for (std::int64_t i = 0; i < n; ++i) pattern.f32()[i] = static_cast<float>(i % 1000003);
  copy_into(t, pattern);

  const std::int64_t edge = 1000;  // elements kept at each end: their granules are never unmapped
  const std::int64_t mapped = reserved_mapped_bytes(t.raw());
  EXPECT_GE(mapped, n * static_cast<std::int64_t>(sizeof(float)));
  const std::int64_t released = release_pages(t.f32() + edge, n - 2 * edge, Device::cuda);
  EXPECT_GT(released, 0);
  EXPECT_LE(released, (n - 2 * edge) * static_cast<std::int64_t>(sizeof(float)));
  EXPECT_EQ(reserved_mapped_bytes(t.f32() + n / 2), mapped - released) << "any address in it names the reservation";
  EXPECT_EQ(release_pages(t.f32() + edge, n - 2 * edge, Device::cuda), 0) << "released twice";
  commit_pages(t.f32(), n, Device::cuda);
  EXPECT_EQ(reserved_mapped_bytes(t.raw()), mapped);
  const std::vector<float> after = read(t);
  for (std::int64_t i = 0; i < edge; ++i) {
    ASSERT_EQ(after[static_cast<std::size_t>(i)], pattern.f32()[i]) << i;
    ASSERT_EQ(after[static_cast<std::size_t>(n - 1 - i)], pattern.f32()[n - 1 - i]) << n - 1 - i;
  }
  copy_into(t, pattern);  // every granule writable again
  const std::vector<float> again = read(t);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(again[static_cast<std::size_t>(i)], pattern.f32()[i]) << i;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(ReservedDeviceMemory, OtherMemoryIsAnError) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Tensor pooled = Tensor::empty(Shape{1 << 20}, DType::f32, Device::cuda);
  EXPECT_THROW(release_pages(pooled.f32(), pooled.numel(), Device::cuda), Error);
  EXPECT_THROW(commit_pages(pooled.f32(), pooled.numel(), Device::cuda), Error);
  const Tensor reserved = Tensor::reservable(Shape{1 << 10}, DType::f32, Device::cuda);
  EXPECT_THROW(commit_pages(reserved.f32(), std::int64_t{1} << 30, Device::cuda), Error) << "past the end";
}

}  // namespace
}  // namespace ringtrain
