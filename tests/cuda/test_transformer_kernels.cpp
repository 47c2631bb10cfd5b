// The GPT layers' kernels against the CPU layers (the reference): the embedding's token-table
// and position gradients bit for bit in f32 (the same sums in the same order), with more
// positions than one grid's 65,535 rows; LayerNorm forward and backward with more rows than one
// grid of warps covers; the causal softmax's zeros above the diagonal and its backward against the
// CPU layer's rule (dp above the diagonal never read). Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "kernels/transformer_kernels.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain {
namespace {

using test::DeviceBuffer;

TEST(CudaTransformerKernels, EmbeddingMatchesCpuBitForBitBeyondOneGrid) {
  RT_SKIP_WITHOUT_GPU();
  const std::int64_t vocab = 37, block = 16, c = 40, t = 16, n = 4400;  // 70,400 positions
  const std::int64_t rows = n * t;
  Embedding cpu(vocab, block, c);
  cpu.configure(Shape{t});
  Rng rng(11);
  std::vector<float> wte(vocab * c), wpe(block * c), dwte(vocab * c), dwpe(block * c);
  for (float& v : wte) v = rng.uniform() - 0.5f;
  for (float& v : wpe) v = rng.uniform() - 0.5f;
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(rows));
  for (auto& tok : tokens) tok = static_cast<std::int32_t>(rng.uniform() * 30) % 30;  // tokens 30..36 unused
  std::vector<float> dy = test::random_values(static_cast<std::size_t>(rows * c), 5);
  cpu.bind({Tensor::wrap(wte.data(), Shape{vocab, c}), Tensor::wrap(wpe.data(), Shape{block, c})},
           {Tensor::wrap(dwte.data(), Shape{vocab, c}), Tensor::wrap(dwpe.data(), Shape{block, c})});
  std::vector<float> y(static_cast<std::size_t>(rows * c));
  Tensor tx = Tensor::wrap(tokens.data(), Shape{n, t}, DType::i32), ty = Tensor::wrap(y.data(), Shape{n, t, c});
  cpu.forward(tx, ty, StepInfo{});
  cpu.backward(tx, ty, Tensor::wrap(dy.data(), Shape{n, t, c}), nullptr);

  auto d_tokens = DeviceBuffer::of(tokens), d_wte = DeviceBuffer::of(wte), d_wpe = DeviceBuffer::of(wpe);
  auto d_dy = DeviceBuffer::of(dy);
  DeviceBuffer d_y(y.size() * sizeof(float)), d_dwte(dwte.size() * sizeof(float)), d_dwpe(dwpe.size() * sizeof(float));
  kernels::launch_embedding_forward(d_y.get(), d_tokens.as<std::int32_t>(), d_wte.as<float>(), d_wpe.as<float>(), rows,
                                    t, c, vocab, 0, DType::f32, nullptr);
  const std::size_t bytes = kernels::embedding_backward_scratch_bytes(rows, vocab);
  DeviceBuffer scratch(bytes);
  kernels::launch_embedding_backward(d_dwte.as<float>(), d_dwpe.as<float>(), d_dy.get(), d_tokens.as<std::int32_t>(),
                                     rows, t, c, vocab, block, scratch.get(), bytes, DType::f32, nullptr);
  test::expect_same_bits(d_y.read<float>(), y);
  test::expect_same_bits(d_dwte.read<float>(), dwte);  // rows 30..36 zero on both sides
  test::expect_same_bits(d_dwpe.read<float>(), dwpe);
}

TEST(CudaTransformerKernels, LayerNormMatchesCpuBeyondOneGridOfWarps) {
  RT_SKIP_WITHOUT_GPU();
  const std::int64_t c = 3, rows = 65'535 * 8 + 77;  // a second turn of the warps' grid-stride loop
  for (DType dtype : test::kFloatDTypes) {
    LayerNorm cpu(1e-5);
    cpu.configure(Shape{c});
    std::vector<float> w{0.5f, -1.25f, 2.0f}, b{0.1f, 0.0f, -0.3f}, dw(3), db(3);
    cpu.bind({Tensor::wrap(w.data(), Shape{c}), Tensor::wrap(b.data(), Shape{c})},
             {Tensor::wrap(dw.data(), Shape{c}), Tensor::wrap(db.data(), Shape{c})});
    std::vector<float> x = test::random_values(static_cast<std::size_t>(rows * c), 3, dtype, 2.0f);
    std::vector<float> dy = test::random_values(static_cast<std::size_t>(rows * c), 4, dtype);
    std::vector<float> y(x.size()), dx(x.size());
    Tensor tx = Tensor::wrap(x.data(), Shape{rows, c}), ty = Tensor::wrap(y.data(), Shape{rows, c});
    Tensor tdx = Tensor::wrap(dx.data(), Shape{rows, c});
    cpu.forward(tx, ty, StepInfo{});
    cpu.backward(tx, ty, Tensor::wrap(dy.data(), Shape{rows, c}), &tdx);

    auto d_x = DeviceBuffer::of_values(x, dtype), d_dy = DeviceBuffer::of_values(dy, dtype);
    auto d_w = DeviceBuffer::of(w), d_b = DeviceBuffer::of(b);
    DeviceBuffer d_y(x.size() * dtype_size(dtype)), d_dx(x.size() * dtype_size(dtype));
    DeviceBuffer d_mean(rows * sizeof(float)), d_rstd(rows * sizeof(float)), d_dw(3 * sizeof(float)),
        d_db(3 * sizeof(float));
    DeviceBuffer scratch(static_cast<std::size_t>(kernels::layernorm_backward_scratch(rows, c)) * sizeof(float));
    kernels::launch_layernorm_forward(d_y.get(), d_x.get(), d_w.as<float>(), d_b.as<float>(), d_mean.as<float>(),
                                      d_rstd.as<float>(), rows, c, 1e-5f, dtype, nullptr);
    kernels::launch_layernorm_backward(d_dx.get(), d_dw.as<float>(), d_db.as<float>(), d_dy.get(), d_x.get(),
                                       d_w.as<float>(), d_mean.as<float>(), d_rstd.as<float>(), rows, c,
                                       scratch.as<float>(), dtype, nullptr);
    const double tol = test::tolerance(dtype);
    EXPECT_LT(test::max_rel_error(d_y.read_values(dtype), test::round_to(dtype, y)), tol) << dtype_name(dtype);
    EXPECT_LT(test::max_rel_error(d_dx.read_values(dtype), test::round_to(dtype, dx)), tol) << dtype_name(dtype);
    // half a million rows summed in another order (chunks of 32, then the chunks)
    EXPECT_LT(test::max_rel_error(d_dw.read<float>(), dw), 1e-3) << dtype_name(dtype);
    EXPECT_LT(test::max_rel_error(d_db.read<float>(), db), 1e-3) << dtype_name(dtype);
  }
}

TEST(CudaTransformerKernels, CausalSoftmaxHidesTheFutureAndRecomputesFromItsLogSumExp) {
  RT_SKIP_WITHOUT_GPU();
  const std::int64_t batches = 3, t = 37;
  const std::vector<float> s = test::random_values(static_cast<std::size_t>(batches * t * t), 9, DType::f32, 4.0f);
  auto d_s = DeviceBuffer::of(s);
  DeviceBuffer d_p(s.size() * sizeof(float)), d_again(s.size() * sizeof(float)), d_lse(batches * t * sizeof(float));
  kernels::launch_causal_softmax(d_p.get(), d_s.as<float>(), d_lse.as<float>(), nullptr, batches, t, DType::f32,
                                 nullptr);
  kernels::launch_causal_softmax(d_again.get(), d_s.as<float>(), nullptr, d_lse.as<float>(), batches, t, DType::f32,
                                 nullptr);
  const std::vector<float> p = d_p.read<float>();
  for (std::int64_t r = 0; r < batches * t; ++r) {
    const std::int64_t i = r % t;
    double sum = 0.0, ref_max = -1e30;
    for (std::int64_t j = 0; j <= i; ++j) ref_max = std::max(ref_max, static_cast<double>(s[r * t + j]));
    double ref_sum = 0.0;
    for (std::int64_t j = 0; j <= i; ++j) ref_sum += std::exp(s[r * t + j] - ref_max);
    for (std::int64_t j = 0; j < t; ++j) {
      const float got = p[static_cast<std::size_t>(r * t + j)];
      if (j > i) {
        ASSERT_EQ(got, 0.0f) << "row " << r << " column " << j;
        continue;
      }
      EXPECT_NEAR(got, std::exp(s[r * t + j] - ref_max) / ref_sum, 1e-6) << "row " << r << " column " << j;
      sum += got;
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
  test::expect_same_bits(d_again.read<float>(), p);
}

// ds = p (dp - sum over j <= i of p dp) for j <= i, 0 above the diagonal, in f32 and bf16, with
// NaN in dp above the diagonal (must not be read) and rows longer than a warp.
TEST(CudaTransformerKernels, CausalSoftmaxBackwardReadsOnlyTheVisibleColumns) {
  RT_SKIP_WITHOUT_GPU();
  const std::int64_t batches = 3, t = 77;
  for (const DType dtype : {DType::f32, DType::bf16}) {
    std::vector<float> p = test::random_values(static_cast<std::size_t>(batches * t * t), 10, dtype);
    std::vector<float> dp = test::random_values(p.size(), 11, DType::f32, 2.0f);
    std::vector<float> ds(p.size(), 0.0f);
    for (std::int64_t r = 0; r < batches * t; ++r) {
      const std::int64_t i = r % t;
      double d = 0.0;
      for (std::int64_t j = 0; j <= i; ++j) d += static_cast<double>(p[r * t + j]) * dp[r * t + j];
      for (std::int64_t j = 0; j < t; ++j) {
        const auto at = static_cast<std::size_t>(r * t + j);
        if (j > i) {
          p[at] = 0.0f;
          dp[at] = std::nanf("");
          continue;
        }
        ds[at] = test::round_to(dtype, static_cast<float>(p[at] * (dp[at] - d)));
      }
    }
    auto d_p = DeviceBuffer::of_values(p, dtype);
    const auto d_dp = DeviceBuffer::of(dp);
    kernels::launch_causal_softmax_backward(d_p.get(), d_dp.as<float>(), batches, t, dtype, nullptr);
    const std::vector<float> got = d_p.read_values(dtype);
    EXPECT_LT(test::max_rel_error(got, ds), test::tolerance(dtype)) << dtype_name(dtype);
    for (std::int64_t r = 0; r < batches * t; ++r)
      for (std::int64_t j = r % t + 1; j < t; ++j)
        ASSERT_EQ(got[static_cast<std::size_t>(r * t + j)], 0.0f)
            << dtype_name(dtype) << " row " << r << " column " << j;
  }
}

}  // namespace
}  // namespace ringtrain
