// AttentionGemms, the CUDA attention's GEMM plan, run on the CPU with blas::sgemm (and the causal
// softmax and its backward as plain loops, as the CUDA kernels compute them): Y and dx equal the
// CPU CausalSelfAttention layer's, with every element of y and dx written, when the plan
// launches once per sample (samples <= heads) and once per head (more samples than heads).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "nn/attention_gemms.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/layers.hpp"
#include "tensor/blas.hpp"

namespace ringtrain {
namespace {

using Buffer = AttentionGemms::Buffer;
using Buffers = std::array<float*, 6>;

void run(const AttentionGemms::Product& p, const Buffers& buffers) {
  auto base = [&](Buffer b) { return buffers[static_cast<std::size_t>(b)]; };
  for (const AttentionGemms::Launch& l : p.launches) {
    const GemmShape& s = l.shape;
    for (std::int64_t i = 0; i < s.batch; ++i)
      blas::sgemm(s.trans_a, s.trans_b, s.m, s.n, s.k, p.alpha, base(p.a) + l.a + i * s.stride_a, s.lda,
                  base(p.b) + l.b + i * s.stride_b, s.ldb, 0.0f, base(p.c) + l.c + i * s.stride_c, s.ldc);
  }
}

// p = softmax of each row's columns 0..i (row i of each [t, t] matrix), 0 beyond.
void causal_softmax(const std::vector<float>& s, std::vector<float>& p, std::int64_t t) {
  for (std::size_t r = 0; r < s.size() / static_cast<std::size_t>(t); ++r) {
    const std::int64_t visible = static_cast<std::int64_t>(r) % t + 1;
    const float* row = s.data() + r * static_cast<std::size_t>(t);
    float* out = p.data() + r * static_cast<std::size_t>(t);
    const float top = *std::max_element(row, row + visible);
    double sum = 0.0;
    for (std::int64_t j = 0; j < visible; ++j) sum += std::exp(static_cast<double>(row[j] - top));
    for (std::int64_t j = 0; j < t; ++j)
      out[j] = j < visible ? static_cast<float>(std::exp(static_cast<double>(row[j] - top)) / sum) : 0.0f;
  }
}

// p := p (dp - sum over the visible columns of p dp), 0 beyond.
void causal_softmax_backward(std::vector<float>& p, const std::vector<float>& dp, std::int64_t t) {
  for (std::size_t r = 0; r < p.size() / static_cast<std::size_t>(t); ++r) {
    const std::int64_t visible = static_cast<std::int64_t>(r) % t + 1;
    float* row = p.data() + r * static_cast<std::size_t>(t);
    const float* g = dp.data() + r * static_cast<std::size_t>(t);
    double d = 0.0;
    for (std::int64_t j = 0; j < visible; ++j) d += static_cast<double>(row[j]) * g[j];
    for (std::int64_t j = 0; j < t; ++j) row[j] = j < visible ? static_cast<float>(row[j] * (g[j] - d)) : 0.0f;
  }
}

// The largest |got - want| over the largest |want|; infinity if got has a NaN (an element not written).
double error(const std::vector<float>& got, const float* want) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, static_cast<double>(std::fabs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
  }
  return diff / scale;
}

void check_plan(std::int64_t n, std::int64_t t, std::int64_t heads, std::int64_t hs) {
  SCOPED_TRACE(::testing::Message() << n << " samples, " << heads << " heads");
  const std::int64_t c = heads * hs;
  CausalSelfAttention layer(heads);
  layer.configure(Shape{t, 3 * c});
  Tensor x = Tensor::empty(Shape{n, t, 3 * c}), y = Tensor::empty(Shape{n, t, c});
  Tensor dy = Tensor::empty(Shape{n, t, c}), dx = Tensor::empty(Shape{n, t, 3 * c});
  Rng rng(stream_key(31));
  for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 3.0f * rng.uniform() - 1.5f;
  for (std::int64_t i = 0; i < dy.numel(); ++i) dy.f32()[i] = 2.0f * rng.uniform() - 1.0f;
  layer.forward(x, y, StepInfo{});
  layer.backward(x, y, dy, &dx);

  const AttentionGemms plan(n, t, heads, hs);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> y_plan(static_cast<std::size_t>(y.numel()), nan),
      dx_plan(static_cast<std::size_t>(dx.numel()), nan);
  std::vector<float> scores(static_cast<std::size_t>(n * heads * t * t), nan), probs(scores.size(), nan);
  const Buffers buffers{x.f32(), y_plan.data(), dy.f32(), dx_plan.data(), scores.data(), probs.data()};
  run(plan.scores(), buffers);
  causal_softmax(scores, probs, t);
  run(plan.output(), buffers);
  EXPECT_LT(error(y_plan, y.f32()), 2e-5);
  run(plan.value_grad(), buffers);
  run(plan.prob_grad(), buffers);
  causal_softmax_backward(probs, scores, t);
  run(plan.query_grad(), buffers);
  run(plan.key_grad(), buffers);
  EXPECT_LT(error(dx_plan, dx.f32()), 2e-5);
  const std::size_t launches = plan.scores().launches.size();
  EXPECT_EQ(launches, static_cast<std::size_t>(std::min(n, heads)));
}

TEST(AttentionGemms, OneLaunchPerSampleMatchesTheCpuLayer) { check_plan(2, 37, 3, 5); }

TEST(AttentionGemms, OneLaunchPerHeadMatchesTheCpuLayer) { check_plan(4, 37, 2, 5); }

TEST(AttentionGemms, RefusesEmptyShapes) { EXPECT_THROW(AttentionGemms(0, 4, 2, 3), Error); }

}  // namespace
}  // namespace ringtrain
