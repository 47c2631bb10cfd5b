// CUDA optimizer kernels against the CPU optimizers (the reference), gradient scale included:
// the updates (not the parameters) agree element by element to f32 error < 1e-5 beyond one
// rounding of the parameter per step (the GPU fuses multiply-adds), over an arena larger than one
// launch grid; vector and element paths give the same bits; the compute copy
// they write is the updated parameters rounded as the host rounds. Skips cleanly when no GPU is
// visible (login nodes, CI).
#include <cmath>
#include <string>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "kernels/optimizer_kernels.hpp"
#include "ringtrain/optim/optimizer.hpp"

namespace ringtrain {
namespace {

using test::DeviceBuffer;
using test::random_values;

// Not 1, so a kernel that ignored it would fail (1 / (loss scale 1024 x 4 ranks)).
constexpr float kGradScale = 1.0f / 4096.0f;
// AdamW is scale-invariant unless scaled gradients come near eps (1e-8).
constexpr float kAdamGradScale = 1e-8f;

TEST(CudaOptimizerKernels, SgdNesterovMatchesCpu) {
  RT_SKIP_WITHOUT_GPU();
  const std::size_t n = test::kBeyondOneGrid;
  auto p = random_values(n, 1), g = random_values(n, 2);
  const std::vector<float> before = p;
  SgdHyper h;
  h.momentum = 0.9f;
  h.nesterov = true;
  h.weight_decay = 1e-4f;
  auto dp = DeviceBuffer::of(p), dg = DeviceBuffer::of(g), dv = DeviceBuffer::of(std::vector<float>(n, 0.0f));
  Sgd cpu(static_cast<std::int64_t>(n), h);
  for (int step = 0; step < 3; ++step) {
    h.lr = 0.05f;
    kernels::launch_sgd_update(dp.as<float>(), dg.as<float>(), dv.as<float>(), static_cast<std::int64_t>(n), kGradScale,
                               h, nullptr);
    cpu.step(p.data(), g.data(), static_cast<std::int64_t>(n), 0.05f, kGradScale);
  }
  EXPECT_LT(test::max_update_error(dp.read<float>(), p, before, 3), test::kTolF32);
}

TEST(CudaOptimizerKernels, AdamWMatchesCpu) {
  RT_SKIP_WITHOUT_GPU();
  const std::size_t n = 65'537;
  auto p = random_values(n, 3), g = random_values(n, 4);
  const std::vector<float> before = p;
  AdamWHyper h;
  const std::vector<float> zeros(n, 0.0f);
  auto dp = DeviceBuffer::of(p), dg = DeviceBuffer::of(g), dm = DeviceBuffer::of(zeros), dv = DeviceBuffer::of(zeros);
  AdamW cpu(static_cast<std::int64_t>(n), h);
  for (int t = 1; t <= 3; ++t) {
    cpu.step(p.data(), g.data(), static_cast<std::int64_t>(n), 1e-3f, kAdamGradScale);
    h.lr = 1e-3f;
    h.bias_correction1 = 1.0f - static_cast<float>(std::pow(h.beta1, t));
    h.bias_correction2 = 1.0f - static_cast<float>(std::pow(h.beta2, t));
    kernels::launch_adamw_update(dp.as<float>(), dg.as<float>(), dm.as<float>(), dv.as<float>(),
                                 static_cast<std::int64_t>(n), kAdamGradScale, h, nullptr);
  }
  EXPECT_LT(test::max_update_error(dp.read<float>(), p, before, 3), test::kTolF32);
}

// The kernels move float4 vectors when every arena is 16-byte aligned and single elements
// otherwise (a ZeRO shard or weight-decay group starting mid-vector): arenas one element in must
// give the same bits as aligned ones.
TEST(CudaOptimizerKernels, UnalignedArenasGiveTheSameBitsAsAlignedOnes) {
  RT_SKIP_WITHOUT_GPU();
  const std::size_t n = 1'003, f = sizeof(float);
  const auto len = static_cast<std::int64_t>(n);
  std::vector<std::vector<float>> host;  // p, g, m, v: n + 1 values each
  for (std::uint64_t seed : {11, 12, 13, 14}) host.push_back(random_values(n + 1, seed));
  for (float& x : host[3]) x = std::fabs(x);  // second moments are not negative
  std::vector<DeviceBuffer> whole, aligned;
  for (const auto& h : host) {
    whole.push_back(DeviceBuffer::of(h));
    aligned.push_back(DeviceBuffer::of(std::vector<float>(h.begin() + 1, h.end())));
  }
  auto view = [&](std::size_t k) { return static_cast<float*>(whole[k].at(f)); };
  AdamWHyper adam;
  adam.lr = 1e-3f;
  adam.weight_decay = 0.1f;
  kernels::launch_adamw_update(aligned[0].as<float>(), aligned[1].as<float>(), aligned[2].as<float>(),
                               aligned[3].as<float>(), len, kGradScale, adam, nullptr);
  kernels::launch_adamw_update(view(0), view(1), view(2), view(3), len, kGradScale, adam, nullptr);
  for (std::size_t k : {0u, 2u, 3u}) test::expect_same_bits(whole[k].bytes_from(f), aligned[k].read<std::uint8_t>());
  SgdHyper sgd;
  sgd.lr = 0.05f;
  sgd.momentum = 0.9f;
  sgd.weight_decay = 1e-4f;
  kernels::launch_sgd_update(aligned[0].as<float>(), aligned[1].as<float>(), aligned[2].as<float>(), len, kGradScale,
                             sgd, nullptr);
  kernels::launch_sgd_update(view(0), view(1), view(2), len, kGradScale, sgd, nullptr);
  for (std::size_t k : {0u, 2u}) test::expect_same_bits(whole[k].bytes_from(f), aligned[k].read<std::uint8_t>());
}

// The model's compute copy written by the update's own pass: each updated parameter rounded to
// bf16/f16 exactly as the host rounds it, in the vector path and the element path (arenas one
// element in); a step the device scale skips (0) leaves the copy as it was.
TEST(CudaOptimizerKernels, TheComputeCopyIsTheUpdatedParametersRounded) {
  RT_SKIP_WITHOUT_GPU();
  const std::size_t n = 1'003;
  const auto len = static_cast<std::int64_t>(n);
  for (DType dtype : {DType::bf16, DType::f16})
    for (std::size_t offset : {0u, 1u}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (offset != 0 ? " one element in" : " aligned"));
      const auto p = random_values(n + 1, 21), g = random_values(n + 1, 22);
      const std::vector<float> zeros(n + 1, 0.0f);
      auto dp = DeviceBuffer::of(p), dg = DeviceBuffer::of(g), dm = DeviceBuffer::of(zeros),
           dv = DeviceBuffer::of(zeros);
      DeviceBuffer copy((n + 1) * sizeof(std::uint16_t));  // poisoned
      auto at = [&](const DeviceBuffer& b) { return static_cast<float*>(b.at(offset * sizeof(float))); };
      const ComputeCopyOut out{copy.at(offset * sizeof(std::uint16_t)), dtype};
      AdamWHyper h;
      h.lr = 1e-3f;
      kernels::launch_adamw_update(at(dp), at(dg), at(dm), at(dv), len, kGradScale, h, nullptr, nullptr, out);
      const std::vector<float> updated = dp.read<float>();
      const std::vector<std::uint16_t> got = copy.read<std::uint16_t>();
      for (std::size_t i = offset; i < offset + n; ++i)
        ASSERT_EQ(got[i], dtype == DType::bf16 ? float_to_bf16(updated[i]) : float_to_f16(updated[i])) << i;
      // skipped on the device: parameters and copy untouched
      const auto skip = DeviceBuffer::of(std::vector<float>{0.0f});
      kernels::launch_sgd_update(at(dp), at(dg), at(dm), len, kGradScale, SgdHyper{}, nullptr, skip.as<float>(), out);
      test::expect_same_bits(dp.read<float>(), updated);
      test::expect_same_bits(copy.read<std::uint16_t>(), got);
    }
}

TEST(CudaOptimizerKernels, EmptyArenaLaunchesNothing) {
  RT_SKIP_WITHOUT_GPU();
  DeviceBuffer poisoned(4 * sizeof(float));
  float* x = poisoned.as<float>();
  EXPECT_NO_THROW(kernels::launch_sgd_update(x, x, x, 0, 1.0f, SgdHyper{}, nullptr));
  EXPECT_NO_THROW(kernels::launch_adamw_update(x, x, x, x, 0, 1.0f, AdamWHyper{}, nullptr));
  for (float v : poisoned.read<float>()) EXPECT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace ringtrain
