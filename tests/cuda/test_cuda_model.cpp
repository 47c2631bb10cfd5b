// The CUDA layers end to end against the CPU model (the reference): the same MLP, CNN and GPT with
// the same parameters, forward logits and every parameter gradient after one backward. For
// bf16/f16 the CPU model emulates the same precision (rounded inputs, parameters and
// activations), so both round alike. Logits: max relative error (f32 1e-4 — cuDNN and
// cuBLASLt reassociate sums —, tf32 1e-3, bf16/f16 2e-2). Gradients: L2 relative error with
// 5x those bounds, because a pre-activation within rounding of 0 may pass ReLU on one side
// and not the other, moving one whole gradient row. Also the fused optimizer against the CPU
// optimizer, and the causal self-attention layer (cuDNN-fused and unfused) against the CPU layer.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_test_models.hpp"
#include "cuda/cuda_test_support.hpp"
#include "nn/cuda/cuda_layers.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "support/test_context.hpp"

namespace ringtrain {
namespace {

using test::bind_gpu;
using test::kCnn;
using test::kGpt;
using test::kGptPositions;
using test::kGptVocab;
using test::kInput;
using test::kMlp;
using test::l2_rel_error;

// The values of a float tensor (any device), as f32.
std::vector<float> to_host_f32(const Tensor& t) {
  std::vector<std::uint8_t> raw(t.nbytes());
  copy_into(Tensor::wrap(raw.data(), t.shape(), t.dtype()), t);
  return test::decode(raw, t.dtype());
}

// A device tensor holding v stored as dtype (copy_into checks that v fills shape).
Tensor to_device(const std::vector<float>& v, const Shape& shape, DType dtype) {
  std::vector<std::uint8_t> raw = test::encode(v, dtype);
  Tensor dev = Tensor::empty(shape, dtype, Device::cuda);
  copy_into(dev, Tensor::wrap(raw.data(), Shape{static_cast<std::int64_t>(v.size())}, dtype));
  return dev;
}

// The CPU and GPU models of `text` for input `input` (f32 samples, or token ids for a GPT), the
// GPU one starting from the CPU one's parameters: the forward outputs and every parameter
// gradient after one backward are compared.
void compare_model(const char* text, const Shape& input, DType precision, bool tf32, double bound) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  Config c = Config::parse(text, "test.toml");
  Config m = c.has("model") ? c.section("model") : c;  // a GPT's keys are read in [model]
  auto cpu = build_model(m, input, ComputeOptions{Device::cpu, precision, false});
  auto gpu = build_model(m, input, ComputeOptions{Device::cuda, precision, tf32});
  cpu->init_params(7);
  copy_into(gpu->params(), cpu->params());
  const std::int64_t n = 16;
  Rng rng(3);
  Tensor xc = Tensor::empty(input.with_batch(n), cpu->input_dtype());
  Tensor xg;
  if (cpu->input_dtype() == DType::i32) {  // token ids, the same on both sides
    for (std::int64_t i = 0; i < xc.numel(); ++i)
      xc.data<std::int32_t>()[i] =
          static_cast<std::int32_t>(static_cast<std::int64_t>(rng.uniform() * kGptVocab) % kGptVocab);
    xg = Tensor::empty(xc.shape(), DType::i32, Device::cuda);
    copy_into(xg, xc);
  } else {
    std::vector<float> x(static_cast<std::size_t>(xc.numel()));
    for (float& v : x) v = 2.0f * rng.uniform() - 1.0f;
    std::copy(x.begin(), x.end(), xc.f32());
    xg = to_device(x, xc.shape(), precision);
  }
  StepInfo info;
  const std::vector<float> ref_out = to_host_f32(cpu->forward(xc, info));
  const std::vector<float> got_out = to_host_f32(gpu->forward(xg, info));
  EXPECT_LT(test::max_rel_error(got_out, ref_out), bound) << "logits";

  std::vector<float> dy(ref_out.size());
  for (float& v : dy) v = (2.0f * rng.uniform() - 1.0f) / static_cast<float>(n);
  Tensor dyc = Tensor::empty(cpu->output_shape().with_batch(n));
  std::copy(dy.begin(), dy.end(), dyc.f32());
  cpu->backward(dyc);
  gpu->backward(to_device(dy, gpu->output_shape().with_batch(n), precision));
  const std::vector<float> ref_g = to_host_f32(cpu->grads()), got_g = to_host_f32(gpu->grads());
  for (const Model::ParamTensor& p : cpu->param_tensors()) {
    const auto b = static_cast<std::ptrdiff_t>(p.offset), e = b + static_cast<std::ptrdiff_t>(p.shape.numel());
    EXPECT_LT(l2_rel_error({got_g.begin() + b, got_g.begin() + e}, {ref_g.begin() + b, ref_g.begin() + e}), 5 * bound)
        << "gradient of layer " << p.layer << " " << p.kind << "." << p.name;
  }
}

TEST(CudaTensor, EmptyIsZeroedAndCopiesRoundTrip) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  std::vector<float> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) - 3.5f;
  const Tensor zeros = Tensor::empty(Shape{1000}, DType::f32, Device::cuda);
  EXPECT_EQ(zeros.device(), Device::cuda);
  EXPECT_EQ(to_host_f32(zeros), std::vector<float>(1000, 0.0f));
  const Tensor dev = to_device(v, Shape{1000}, DType::f32);
  Tensor other = Tensor::empty(Shape{1000}, DType::f32, Device::cuda);
  copy_into(other, dev);  // device to device
  EXPECT_EQ(to_host_f32(other.flat_slice(10, Shape{990})), std::vector<float>(v.begin() + 10, v.end()));
}

TEST(CudaModel, MlpF32MatchesCpu) { compare_model(kMlp, kInput, DType::f32, false, 1e-4); }
TEST(CudaModel, MlpTf32MatchesCpu) { compare_model(kMlp, kInput, DType::f32, true, 1e-3); }
TEST(CudaModel, MlpBf16MatchesCpu) { compare_model(kMlp, kInput, DType::bf16, false, 2e-2); }
TEST(CudaModel, MlpF16MatchesCpu) { compare_model(kMlp, kInput, DType::f16, false, 2e-2); }
TEST(CudaModel, CnnF32MatchesCpu) { compare_model(kCnn, kInput, DType::f32, false, 1e-4); }
TEST(CudaModel, CnnBf16MatchesCpu) { compare_model(kCnn, kInput, DType::bf16, false, 2e-2); }
// The GPT's CUDA layers (embedding, LayerNorm, attention, residual add, GELU, tied LM head).
TEST(CudaModel, GptF32MatchesCpu) { compare_model(kGpt, Shape{kGptPositions}, DType::f32, false, 1e-4); }
TEST(CudaModel, GptBf16MatchesCpu) { compare_model(kGpt, Shape{kGptPositions}, DType::bf16, false, 2e-2); }

// An LM-head-like Linear of 50257 outputs: rows of neither 16-byte f32 nor bf16 vectors and over a
// GFLOP, so its GEMMs run over padded outputs (CudaLinear::padded_out; its bias padded too); the
// ReLU before it puts the padded dy through the dx GEMM's ReLU-gradient epilogue. Two heads at one
// precision: with a ReLU before it and a bias, then without either (the GPT's LM head).
void compare_wide_heads(DType precision, double bound) {
  for (const bool relu_and_bias : {true, false}) {
    SCOPED_TRACE(relu_and_bias ? "relu, bias" : "no relu, no bias");
    const std::string text = std::string("[[layers]]\ntype = \"linear\"\nout = 640\n") +
                             (relu_and_bias ? "[[layers]]\ntype = \"relu\"\n" : "") +
                             "[[layers]]\ntype = \"linear\"\nout = 50257\n" + (relu_and_bias ? "" : "bias = false\n");
    compare_model(text.c_str(), Shape{640}, precision, false, bound);
  }
}
TEST(CudaModel, WideUnalignedHeadF32MatchesCpu) { compare_wide_heads(DType::f32, 1e-4); }
TEST(CudaModel, WideUnalignedHeadBf16MatchesCpu) { compare_wide_heads(DType::bf16, 2e-2); }

TEST(CudaModel, FusedOptimizerMatchesCpu) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::int64_t n = 100003;
  Rng rng(5);
  std::vector<float> p(n), g(n);
  for (std::int64_t i = 0; i < n; ++i) {
    p[i] = rng.uniform() - 0.5f;
    g[i] = rng.uniform() - 0.5f;
  }
  AdamWHyper h;
  AdamW cpu(n, h), gpu(n, h, Device::cuda);
  std::vector<float> pc = p;
  const std::vector<float> before = p;
  Tensor pd = to_device(p, Shape{n}, DType::f32), gd = to_device(g, Shape{n}, DType::f32);
  for (int step = 0; step < 3; ++step) {
    cpu.step(pc.data(), g.data(), n, 1e-2f, 0.5f);
    gpu.step(pd.f32(), gd.f32(), n, 1e-2f, 0.5f);
  }
  EXPECT_LT(test::max_update_error(to_host_f32(pd), pc, before, 3), 1e-5);
  EXPECT_EQ(gpu.steps_taken(), 3);
}

// ---- causal self-attention: fused (cuDNN) and unfused against the CPU layer ----------------

struct AttentionCase {
  std::int64_t n, t, heads, head_size;
};

// Positions that are no multiple of a tile (100), heads of 32 to 128 channels, one sample.
constexpr AttentionCase kAttentionCases[] = {{2, 64, 2, 32}, {3, 100, 4, 64}, {1, 256, 3, 64}, {2, 128, 2, 128}};

struct AttentionRun {
  std::vector<float> y, dx;
};

// The layer's output and input gradient for x [n, t, 3C] and dy [n, t, C] (f32 values, stored
// on the GPU as dtype).
AttentionRun run_attention(Layer& layer, const AttentionCase& a, const std::vector<float>& x,
                           const std::vector<float>& dy, DType dtype, Device device) {
  const std::int64_t c = a.heads * a.head_size;
  const Shape x_shape{a.n, a.t, 3 * c}, y_shape{a.n, a.t, c};
  layer.configure(x_shape.sample());
  const bool gpu = device == Device::cuda;
  Tensor xt = gpu ? to_device(x, x_shape, dtype) : Tensor::empty(x_shape);
  Tensor dyt = gpu ? to_device(dy, y_shape, dtype) : Tensor::empty(y_shape);
  if (!gpu) {
    std::copy(x.begin(), x.end(), xt.f32());
    std::copy(dy.begin(), dy.end(), dyt.f32());
  }
  Tensor yt = Tensor::empty(y_shape, gpu ? dtype : DType::f32, device);
  Tensor dxt = Tensor::empty(x_shape, gpu ? dtype : DType::f32, device);
  layer.forward(xt, yt, StepInfo{});
  layer.backward(xt, yt, dyt, &dxt);
  return {to_host_f32(yt), to_host_f32(dxt)};
}

class CudaAttention : public ::testing::TestWithParam<DType> {};

TEST_P(CudaAttention, FusedAndUnfusedMatchTheCpuLayer) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  const DType dtype = GetParam();
  std::uint64_t seed = 40;
  for (const AttentionCase& a : kAttentionCases) {
    const std::int64_t c = a.heads * a.head_size;
    const auto x = test::random_values(static_cast<std::size_t>(a.n * a.t * 3 * c), seed++, dtype, 2.0f);
    const auto dy = test::random_values(static_cast<std::size_t>(a.n * a.t * c), seed++, dtype);
    CausalSelfAttention cpu(a.heads);
    const AttentionRun ref = run_attention(cpu, a, x, dy, DType::f32, Device::cpu);
    for (const cuda::AttentionKernel kernel : {cuda::AttentionKernel::fused, cuda::AttentionKernel::unfused}) {
      const bool fused = kernel == cuda::AttentionKernel::fused;
      SCOPED_TRACE(::testing::Message() << (fused ? "fused" : "unfused") << " n=" << a.n << " t=" << a.t
                                        << " heads=" << a.heads << " hs=" << a.head_size);
      if (fused && !!cuda::CudnnAttention::frontend_version().empty()) continue;  // the test below says so
      cuda::CudaCausalSelfAttention gpu(std::make_shared<cuda::CudaCompute>(dtype, false), a.heads, kernel);
      const AttentionRun got = run_attention(gpu, a, x, dy, dtype, Device::cuda);
      EXPECT_LT(test::max_rel_error(got.y, test::round_to(dtype, ref.y)), 2e-2) << "y";
      EXPECT_LT(l2_rel_error(got.dx, ref.dx), 2e-2) << "dx";
    }
  }
}

// The fused backward is cuDNN's deterministic one: the same inputs give the same bits (resume
// and CUDA graph replay rely on it), also for a second layer object.
TEST_P(CudaAttention, FusedIsBitwiseRepeatable) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  if (!!cuda::CudnnAttention::frontend_version().empty()) GTEST_SKIP() << "built without cudnn-frontend";
  const DType dtype = GetParam();
  const AttentionCase a{4, 512, 4, 64};
  const std::int64_t c = a.heads * a.head_size;
  const auto x = test::random_values(static_cast<std::size_t>(a.n * a.t * 3 * c), 50, dtype, 2.0f);
  const auto dy = test::random_values(static_cast<std::size_t>(a.n * a.t * c), 51, dtype);
  auto compute = std::make_shared<cuda::CudaCompute>(dtype, false);
  cuda::CudaCausalSelfAttention first(compute, a.heads, cuda::AttentionKernel::fused);
  cuda::CudaCausalSelfAttention second(compute, a.heads, cuda::AttentionKernel::fused);
  const AttentionRun once = run_attention(first, a, x, dy, dtype, Device::cuda);
  const AttentionRun again = run_attention(first, a, x, dy, dtype, Device::cuda);
  const AttentionRun other = run_attention(second, a, x, dy, dtype, Device::cuda);
  EXPECT_EQ(once.y, again.y);
  EXPECT_EQ(once.dx, again.dx);
  EXPECT_EQ(once.dx, other.dx);
}

// Where the fused kernel cannot run, asking for it is an Error naming the reason: f32
// activations (cuDNN's SDPA is bf16/f16), or a build without cudnn-frontend.
TEST(CudaAttentionKernel, FusedRefusesWhatItCannotRun) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  const AttentionCase a{1, 16, 2, 32};
  const std::vector<float> x(static_cast<std::size_t>(a.t * 3 * 64), 0.5f),
      dy(static_cast<std::size_t>(a.t * 64), 0.5f);
  cuda::CudaCausalSelfAttention f32(std::make_shared<cuda::CudaCompute>(DType::f32, false), a.heads,
                                    cuda::AttentionKernel::fused);
  test::expect_error_naming([&] { run_attention(f32, a, x, dy, DType::f32, Device::cuda); },
                            !cuda::CudnnAttention::frontend_version().empty() ? "bf16 or f16" : "cudnn-frontend");
}

INSTANTIATE_TEST_SUITE_P(Types, CudaAttention, ::testing::Values(DType::bf16, DType::f16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

}  // namespace
}  // namespace ringtrain
