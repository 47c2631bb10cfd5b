// device_ops(): the host's operations for Device::cpu, the compiled GPU backend for Device::cuda
// (NotCompiled naming the GPU without CUDA); the host's operations themselves where no tensor-level
// test reaches them: page release on whole pages only, the mask, same-device copy and zero, and
// the refusals of what only a GPU takes (a device scale, a compute copy, a non-f32 add).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/gpu_backend.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/optim/update_rules.hpp"
#include "tensor/device_ops.hpp"

namespace ringtrain {
namespace {

TEST(DeviceOps, EachDeviceHasItsOwnOperations) {
  const DeviceOps& host = device_ops(Device::cpu);
  EXPECT_EQ(&host, &device_ops(Device::cpu)) << "one host object";
  const GpuBackend* gpu_backend = compiled_gpu_backend();
  if (gpu_backend != nullptr) {
    EXPECT_EQ(&device_ops(Device::cuda), static_cast<const DeviceOps*>(gpu_backend));
    EXPECT_NE(&device_ops(Device::cuda), &host);
    return;
  }
  try {
    device_ops(Device::cuda);
    FAIL() << "expected NotCompiled";
  } catch (const NotCompiled& e) {
    EXPECT_NE(std::string(e.what()).find("GPU: this ringtrain was built without CUDA"), std::string::npos) << e.what();
  }
}

// Only the whole pages inside the range go back (they read as zero afterwards); the partial
// pages at both ends keep their values.
TEST(HostOps, ReleasesOnlyWholePagesInsideTheRange) {
  const DeviceOps& host = device_ops(Device::cpu);
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t bytes = std::size_t{1} << 20;  // large enough to be a mapping: page-aligned
  const std::shared_ptr<void> memory = host.reserve_pages(bytes);
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(memory.get()) % page, 0u);
  auto* x = static_cast<float*>(memory.get());
  const std::size_t n = bytes / sizeof(float), per_page = page / sizeof(float);
  for (std::size_t i = 0; i < n; ++i) x[i] = 1.0f;
  // From half-way into page 0 to half-way into page 3: pages 1 and 2 are released.
  EXPECT_EQ(host.release_pages(x + per_page / 2, 3 * page), static_cast<std::int64_t>(2 * page));
  for (std::size_t i = 0; i < 5 * per_page; ++i) {
    const std::size_t at = i / per_page;
    ASSERT_EQ(x[i], at == 1 || at == 2 ? 0.0f : 1.0f) << "element " << i << " on page " << at;
  }
  EXPECT_EQ(host.release_pages(x + per_page / 2, page / 2), 0) << "no whole page inside";
  host.commit_pages(x + per_page, page);  // nothing to do on the host
  x[per_page] = 2.0f;                     // a released page is usable again when written
  EXPECT_EQ(x[per_page], 2.0f);
}

TEST(HostOps, CopiesZeroesAndMasks) {
  const DeviceOps& host = device_ops(Device::cpu);
  std::vector<float> a = {1, 2, 3, 4, 5}, b(5, 9.0f);
  host.copy(b.data(), a.data(), 3 * sizeof(float));
  EXPECT_EQ(b, (std::vector<float>{1, 2, 3, 9, 9}));
  host.zero(b.data() + 1, 2 * sizeof(float));
  EXPECT_EQ(b, (std::vector<float>{1, 0, 0, 9, 9}));
  const std::vector<float> mask = {0, 1, 0, 1, 1};
  host.apply_mask(a.data(), mask.data(), 5);
  EXPECT_EQ(a, (std::vector<float>{0, 2, 0, 4, 5}));
  EXPECT_DOUBLE_EQ(host.sum_of_squares(a.data(), 5), 4.0 + 16.0 + 25.0);
  host.add_into(a.data(), b.data(), 5, DType::f32);
  EXPECT_EQ(a, (std::vector<float>{1, 2, 0, 13, 14}));
}

TEST(HostOps, RefusesWhatOnlyAGpuTakes) {
  const DeviceOps& host = device_ops(Device::cpu);
  std::vector<float> p(4, 1.0f), g(4, 1.0f), m(4), v(4);
  const float scale = 1.0f;
  std::vector<std::uint16_t> copy(4);
  const ComputeCopyOut compute{copy.data(), DType::bf16};
  EXPECT_THROW(host.sgd_update(p.data(), g.data(), m.data(), 4, 1.0f, &scale, {}, SgdHyper{}), Error);
  EXPECT_THROW(host.adamw_update(p.data(), g.data(), m.data(), v.data(), 4, 1.0f, nullptr, compute, AdamWHyper{}),
               Error);
  EXPECT_EQ(p, std::vector<float>(4, 1.0f)) << "nothing updated";
  EXPECT_THROW(host.add_into(copy.data(), copy.data(), 4, DType::bf16), Error);
  float* targets[5] = {p.data(), g.data(), m.data(), v.data(), p.data()};
  EXPECT_THROW(host.add_into_each(targets, 5, g.data(), 4), Error);
}

}  // namespace
}  // namespace ringtrain
