// CUDA optimizer kernels against the CPU optimizers (the reference), f32 relative error
// < 1e-5. Skips cleanly when no GPU is visible (login nodes, CI).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/optimizer_kernels.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "support/test_context.hpp"

namespace ringtrain {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

struct DeviceBuffer {
  float* ptr = nullptr;
  explicit DeviceBuffer(const std::vector<float>& host) {
    EXPECT_EQ(cudaMalloc(&ptr, host.size() * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  std::vector<float> read(std::size_t n) const {
    std::vector<float> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), ptr, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

std::vector<float> random_vector(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = 2.0f * rng.uniform() - 1.0f;
  return v;
}

// Norm-wise relative error (element-wise would flag harmless FMA differences near zero).
void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  double diff = 0.0, ref = 0.0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    diff += (static_cast<double>(gpu[i]) - cpu[i]) * (static_cast<double>(gpu[i]) - cpu[i]);
    ref += static_cast<double>(cpu[i]) * cpu[i];
  }
  EXPECT_LT(std::sqrt(diff / ref), test::kTolF32);
}

TEST(CudaOptimizerKernels, SgdNesterovMatchesCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::size_t n = 1'000'003;
  auto p = random_vector(n, 1), g = random_vector(n, 2);
  SgdHyper h;
  h.momentum = 0.9f;
  h.nesterov = true;
  h.weight_decay = 1e-4f;
  DeviceBuffer dp(p), dg(g), dv(std::vector<float>(n, 0.0f));
  Sgd cpu(static_cast<std::int64_t>(n), h);
  for (int step = 0; step < 3; ++step) {
    h.lr = 0.05f;
    kernels::launch_sgd_update(dp.ptr, dg.ptr, dv.ptr, static_cast<std::int64_t>(n), h, nullptr);
    cpu.step(p.data(), g.data(), static_cast<std::int64_t>(n), 0.05f);
  }
  CUDA_OK(cudaDeviceSynchronize());
  expect_close(dp.read(n), p);
}

TEST(CudaOptimizerKernels, AdamWMatchesCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::size_t n = 65'537;
  auto p = random_vector(n, 3), g = random_vector(n, 4);
  AdamWHyper h;
  DeviceBuffer dp(p), dg(g), dm(std::vector<float>(n, 0.0f)), dv(std::vector<float>(n, 0.0f));
  AdamW cpu(static_cast<std::int64_t>(n), h);
  for (int t = 1; t <= 3; ++t) {
    cpu.step(p.data(), g.data(), static_cast<std::int64_t>(n), 1e-3f);
    h.lr = 1e-3f;
    h.bias_correction1 = 1.0f - static_cast<float>(std::pow(h.beta1, t));
    h.bias_correction2 = 1.0f - static_cast<float>(std::pow(h.beta2, t));
    kernels::launch_adamw_update(dp.ptr, dg.ptr, dm.ptr, dv.ptr, static_cast<std::int64_t>(n), h, nullptr);
  }
  CUDA_OK(cudaDeviceSynchronize());
  expect_close(dp.read(n), p);
}

}  // namespace
}  // namespace ringtrain
