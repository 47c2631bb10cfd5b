// Finite-difference gradient checks for every layer and the loss: the analytic backward
// must match central differences of L = sum(y * r) for a fixed random r.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain {
namespace {

constexpr float kEps = 1e-2f;

struct Harness {
  Layer& layer;
  Shape in_sample;
  std::int64_t batch;
  Tensor x, y, r, params, grads;
  StepInfo info{true, 7, 3, 0};

  Harness(Layer& l, const Shape& in, std::int64_t n) : layer(l), in_sample(in), batch(n) {
    const Shape out = layer.configure(in);
    std::int64_t total = 0;
    for (const auto& s : layer.param_specs()) total += s.shape.numel();
    params = Tensor::empty(Shape{std::max<std::int64_t>(total, 1)});
    grads = Tensor::empty(Shape{std::max<std::int64_t>(total, 1)});
    std::vector<Tensor> p, g;
    std::int64_t off = 0;
    for (const auto& s : layer.param_specs()) {
      p.push_back(params.flat_slice(off, s.shape));
      g.push_back(grads.flat_slice(off, s.shape));
      off += s.shape.numel();
    }
    layer.bind(p, g);
    Rng rng(11);
    for (std::int64_t i = 0; i < total; ++i) params.f32()[i] = 0.2f + 0.8f * rng.uniform();
    x = Tensor::empty(in.with_batch(n));
    y = Tensor::empty(out.with_batch(n));
    r = Tensor::empty(out.with_batch(n));
    for (std::int64_t i = 0; i < r.numel(); ++i) r.f32()[i] = 2.0f * rng.uniform() - 1.0f;
  }

  double loss() {
    layer.forward(x, y, info);
    double s = 0.0;
    for (std::int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(y.f32()[i]) * r.f32()[i];
    return s;
  }

  // Compares analytic and numeric derivatives for every element of `values` (x or params).
  void check(Tensor& values, const Tensor& analytic, const char* what) {
    for (std::int64_t i = 0; i < values.numel(); ++i) {
      float& v = values.f32()[i];
      const float saved = v;
      v = saved + kEps;
      const double up = loss();
      v = saved - kEps;
      const double down = loss();
      v = saved;
      const double numeric = (up - down) / (2.0 * kEps);
      const double a = analytic.f32()[i];
      EXPECT_NEAR(a, numeric, 2e-3 + 1e-2 * std::fabs(numeric)) << layer.kind() << " d" << what << "[" << i << "]";
    }
  }

  void run() {
    loss();
    Tensor dx = Tensor::empty(x.shape());
    layer.backward(x, y, r, &dx);
    Tensor dparams = Tensor::empty(grads.shape());
    std::copy(grads.f32(), grads.f32() + grads.numel(), dparams.f32());
    check(x, dx, "x");
    if (!layer.param_specs().empty()) check(params, dparams, "params");
  }
};

void fill_uniform(Tensor& t, std::uint64_t seed) {
  Rng rng(seed);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = 2.0f * rng.uniform() - 1.0f;
}

TEST(Gradients, Linear) {
  Linear l(5, true);
  Harness h(l, Shape{7}, 3);
  fill_uniform(h.x, 1);
  h.run();
}

TEST(Gradients, LinearWithoutBias) {
  Linear l(4, false);
  Harness h(l, Shape{6}, 2);
  fill_uniform(h.x, 2);
  h.run();
}

TEST(Gradients, Conv2dPadded) {
  Conv2d c(Conv2dOptions{3, 3, 1, 1, true});
  Harness h(c, Shape{2, 5, 6}, 2);
  fill_uniform(h.x, 3);
  h.run();
}

TEST(Gradients, Conv2dStridedNoPadding) {
  Conv2d c(Conv2dOptions{2, 3, 2, 0, false});
  Harness h(c, Shape{3, 7, 7}, 2);
  fill_uniform(h.x, 4);
  h.run();
}

TEST(Gradients, Conv2dStridedWidePadding) {
  Conv2d c(Conv2dOptions{2, 3, 2, 2, true});
  Harness h(c, Shape{2, 5, 4}, 2);
  fill_uniform(h.x, 12);
  h.run();
}

TEST(Gradients, ReLU) {
  ReLU l;
  Harness h(l, Shape{4, 3}, 3);
  fill_uniform(h.x, 5);
  for (std::int64_t i = 0; i < h.x.numel(); ++i)  // stay clear of the kink at 0
    if (std::fabs(h.x.f32()[i]) < 0.05f) h.x.f32()[i] = 0.3f;
  h.run();
}

TEST(Gradients, MaxPool2d) {
  MaxPool2d l(2, 2);
  Harness h(l, Shape{2, 4, 6}, 2);
  // Distinct values 0.1 apart, shuffled, so no window has a near-tie.
  std::vector<float> v(static_cast<std::size_t>(h.x.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * static_cast<float>(i);
  Rng rng(6);
  for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
  std::copy(v.begin(), v.end(), h.x.f32());
  h.run();
}

// The forward values and the input gradient (bit for bit, -0 gradients included) of every window
// against a plain reference, on values with many ties (0, 1, 2 at random, NaN-free) and odd sizes that leave a
// row and a column uncovered: the first maximum in row-major window order wins, for the 2x2
// stride-2 fast path and the general loop alike.
TEST(MaxPool2dWindows, TiesPickTheFirstMaximumOnEveryPath) {
  for (const auto& [k, stride] : std::vector<std::pair<int, int>>{{2, 2}, {2, 1}, {3, 2}}) {
    MaxPool2d l(k, stride);
    const std::int64_t n = 2, c = 3, h = 7, w = 21;  // 2x2: a group of eight windows and a partial one
    const Shape out = l.configure(Shape{c, h, w});
    Tensor x = Tensor::empty(Shape{n, c, h, w}), y = Tensor::empty(out.with_batch(n));
    Rng rng(11);
    for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = static_cast<float>(rng.below(3));
    l.forward(x, y, StepInfo{true, 1, 0, 0});
    Tensor grad = Tensor::empty(out.with_batch(n)), dx = Tensor::empty(x.shape());
    const float grads[] = {-1.5f, -0.0f, 0.5f, 2.0f};  // -0: the zeroed gradient plus it is +0
    for (std::int64_t i = 0; i < grad.numel(); ++i) grad.f32()[i] = grads[rng.below(4)];
    std::fill(dx.f32(), dx.f32() + dx.numel(), 7.0f);  // backward must write every element
    l.backward(x, y, grad, &dx);
    std::vector<float> expected_dx(static_cast<std::size_t>(x.numel()), 0.0f);
    const std::int64_t oh = out[1], ow = out[2];
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t ch = 0; ch < c; ++ch)
        for (std::int64_t oy = 0; oy < oh; ++oy)
          for (std::int64_t ox = 0; ox < ow; ++ox) {
            const std::int64_t plane = (b * c + ch) * h * w;
            std::int64_t best = plane + oy * stride * w + ox * stride;
            for (std::int64_t i = 0; i < k; ++i)
              for (std::int64_t j = 0; j < k; ++j) {
                const std::int64_t at = plane + (oy * stride + i) * w + ox * stride + j;
                if (x.f32()[at] > x.f32()[best]) best = at;
              }
            EXPECT_EQ(y.f32()[((b * c + ch) * oh + oy) * ow + ox], x.f32()[best]) << "k " << k << " stride " << stride;
            expected_dx[static_cast<std::size_t>(best)] += grad.f32()[((b * c + ch) * oh + oy) * ow + ox];
          }
    ASSERT_EQ(std::memcmp(dx.raw(), expected_dx.data(), dx.nbytes()), 0) << "k " << k << " stride " << stride;
  }
}

// A max-pool that absorbed the ReLU before it gives the separate layers' outputs and input
// gradients bit for bit, for the 2x2 stride-2 path and the general loop, on values with ties,
// windows of only negative values and zeros of both signs.
TEST(MaxPool2dAbsorbingReLU, GivesTheSeparateLayersBitsOnEveryPath) {
  const float values[] = {-2.0f, -1.0f, -0.0f, 0.0f, 1.0f, 2.0f};
  for (const auto& [k, stride] : std::vector<std::pair<int, int>>{{2, 2}, {2, 1}, {3, 2}}) {
    ReLU relu;
    MaxPool2d pool(k, stride), fused(k, stride);
    const std::int64_t n = 2, c = 3, h = 7, w = 21;  // 2x2: a group of eight windows and a partial one
    relu.configure(Shape{c, h, w});
    const Shape out = pool.configure(Shape{c, h, w});
    fused.configure(Shape{c, h, w});
    ASSERT_TRUE(fused.absorb_producer(relu));
    Tensor x = Tensor::empty(Shape{n, c, h, w}), r = Tensor::empty(x.shape()), y = Tensor::empty(out.with_batch(n));
    Tensor fused_y = Tensor::empty(y.shape()), dy = Tensor::empty(y.shape());
    Rng rng(static_cast<std::uint64_t>(17 + k * 3 + stride));
    for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = values[rng.below(6)];
    fill_uniform(dy, 23);
    dy.f32()[0] = -0.0f;
    dy.f32()[5] = -0.0f;
    const StepInfo info{true, 1, 0, 0};
    relu.forward(x, r, info);
    pool.forward(r, y, info);
    fused.forward(x, fused_y, info);
    ASSERT_EQ(std::memcmp(y.raw(), fused_y.raw(), y.nbytes()), 0) << "forward, k " << k << " stride " << stride;
    Tensor dr = Tensor::empty(r.shape()), dx = Tensor::empty(x.shape()), fused_dx = Tensor::empty(x.shape());
    pool.backward(r, y, dy, &dr);
    relu.backward(x, r, dr, &dx);
    fused.backward(x, fused_y, dy, &fused_dx);
    ASSERT_EQ(std::memcmp(dx.raw(), fused_dx.raw(), dx.nbytes()), 0) << "backward, k " << k << " stride " << stride;
  }
}

TEST(Gradients, Flatten) {
  Flatten l;
  Harness h(l, Shape{2, 3, 2}, 2);
  fill_uniform(h.x, 7);
  h.run();
}

TEST(Gradients, DropoutTraining) {
  Dropout l(0.4, 0);
  Harness h(l, Shape{20}, 3);
  fill_uniform(h.x, 8);
  h.run();  // the mask depends on (seed, step, rank, layer) only, so it is fixed across calls
}

TEST(Gradients, BatchNorm2d) {
  BatchNorm2d l(0.1, 1e-5);
  Harness h(l, Shape{3, 2, 3}, 4);
  fill_uniform(h.x, 9);
  h.run();
}

// One value per channel (a batch of 1 over 1 x 1 planes) has no batch statistics: a model says
// so before training (Model::min_training_batch), the layer refuses it in training; evaluation,
// on the running statistics, takes it.
TEST(BatchNorm2dBatchOfOne, NeedsTwoValuesPerChannelInTraining) {
  BatchNorm2d flat(0.1, 1e-5), planes(0.1, 1e-5);
  flat.configure(Shape{3, 1, 1});
  planes.configure(Shape{3, 2, 1});
  EXPECT_EQ(flat.min_training_batch(), 2);
  EXPECT_EQ(planes.min_training_batch(), 1);
  Harness h(flat, Shape{3, 1, 1}, 1);
  fill_uniform(h.x, 4);
  EXPECT_THROW(h.layer.forward(h.x, h.y, StepInfo{}), ConfigError);
  StepInfo eval;
  eval.training = false;
  EXPECT_NO_THROW(h.layer.forward(h.x, h.y, eval));
}

// Planes of 25: the sums' vector lanes and their scalar tail; inputs off zero (mean 3).
TEST(Gradients, BatchNorm2dLanesAndTail) {
  BatchNorm2d l(0.1, 1e-5);
  Harness h(l, Shape{2, 5, 5}, 3);
  fill_uniform(h.x, 10);
  for (std::int64_t i = 0; i < h.x.numel(); ++i) h.x.f32()[i] += 3.0f;
  h.run();
}

// The largest |a - b| over the root mean square of `scale` (b itself unless given): a bound that
// stays meaningful for values near zero (a normalized output, a gradient that is a cancellation
// residue, judged against its terms).
double error_against_rms(const std::vector<double>& a, const std::vector<double>& b,
                         const std::vector<double>* scale = nullptr) {
  double squares = 0.0, worst = 0.0;
  for (const double v : scale != nullptr ? *scale : b) squares += v * v;
  const double rms = std::sqrt(squares / static_cast<double>(b.size()));
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst / rms;
}

// Batch norm's float results against the formulas in double: outputs, running statistics (the
// unbiased variance), input and parameter gradients, for channels whose means sit far from zero
// (up to 13 standard deviations: the centred sums must not cancel), planes of 1, 16, 25 and 784.
// dx is judged against the size of its terms: with two values a channel it is a cancellation
// residue, 0 but for eps.
TEST(BatchNorm2dReference, MatchesTheFormulasInDouble) {
  struct Case {
    std::int64_t n, c, h, w;
  };
  for (const Case k : {Case{4, 3, 5, 5}, Case{8, 16, 4, 4}, Case{2, 5, 1, 1}, Case{16, 4, 28, 28}}) {
    SCOPED_TRACE(::testing::Message() << "n " << k.n << " c " << k.c << " h " << k.h << " w " << k.w);
    const double momentum = 0.1, eps = 1e-5;
    BatchNorm2d l(momentum, eps);
    l.configure(Shape{k.c, k.h, k.w});
    const std::int64_t hw = k.h * k.w, m = k.n * hw, numel = k.n * k.c * hw;
    Tensor params = Tensor::empty(Shape{2 * k.c}), grads = Tensor::empty(Shape{2 * k.c});
    fill_uniform(params, 21);
    for (std::int64_t ch = 0; ch < k.c; ++ch) params.f32()[ch] += 1.5f;  // gamma away from 0
    l.bind({params.flat_slice(0, Shape{k.c}), params.flat_slice(k.c, Shape{k.c})},
           {grads.flat_slice(0, Shape{k.c}), grads.flat_slice(k.c, Shape{k.c})});
    Tensor x = Tensor::empty(Shape{k.n, k.c, k.h, k.w}), dy = Tensor::empty(x.shape());
    Tensor y = Tensor::empty(x.shape()), dx = Tensor::empty(x.shape());
    fill_uniform(x, 22);
    fill_uniform(dy, 23);
    for (std::int64_t i = 0; i < numel; ++i) x.f32()[i] += 0.5f * static_cast<float>(i / hw % k.c);
    l.forward(x, y, StepInfo{});
    l.backward(x, y, dy, &dx);

    std::vector<double> y_ref(static_cast<std::size_t>(numel)), dx_ref(y_ref.size()), dx_terms(y_ref.size());
    std::vector<double> mean_ref, var_ref, dgamma_ref, dbeta_ref;
    for (std::int64_t ch = 0; ch < k.c; ++ch) {
      const auto at = [&](std::int64_t b, std::int64_t q) { return (b * k.c + ch) * hw + q; };
      double s = 0.0, ss = 0.0, sdy = 0.0, sdyx = 0.0;
      for (std::int64_t b = 0; b < k.n; ++b)
        for (std::int64_t q = 0; q < hw; ++q) s += x.f32()[at(b, q)];
      const double mu = s / static_cast<double>(m);
      for (std::int64_t b = 0; b < k.n; ++b)
        for (std::int64_t q = 0; q < hw; ++q) ss += (x.f32()[at(b, q)] - mu) * (x.f32()[at(b, q)] - mu);
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(m) + eps);
      const double g = params.f32()[ch], beta = params.f32()[k.c + ch];
      for (std::int64_t b = 0; b < k.n; ++b)
        for (std::int64_t q = 0; q < hw; ++q) {
          const double xhat = (x.f32()[at(b, q)] - mu) * inv;
          y_ref[static_cast<std::size_t>(at(b, q))] = xhat * g + beta;
          sdy += dy.f32()[at(b, q)];
          sdyx += dy.f32()[at(b, q)] * xhat;
        }
      for (std::int64_t b = 0; b < k.n; ++b)
        for (std::int64_t q = 0; q < hw; ++q) {
          const double xhat = (x.f32()[at(b, q)] - mu) * inv;
          const double k_inv = g * inv / static_cast<double>(m), mdy = static_cast<double>(m) * dy.f32()[at(b, q)];
          dx_ref[static_cast<std::size_t>(at(b, q))] = k_inv * (mdy - sdy - xhat * sdyx);
          dx_terms[static_cast<std::size_t>(at(b, q))] =
              std::fabs(k_inv) * (std::fabs(mdy) + std::fabs(sdy) + std::fabs(xhat * sdyx));
        }
      mean_ref.push_back(momentum * mu);  // running mean from 0
      const double unbiased = m > 1 ? ss / static_cast<double>(m - 1) : ss / static_cast<double>(m);
      var_ref.push_back((1.0 - momentum) * 1.0 + momentum * unbiased);  // running variance from 1
      dgamma_ref.push_back(sdyx);
      dbeta_ref.push_back(sdy);
    }
    const auto values = [](const float* p, std::int64_t n) { return std::vector<double>(p, p + n); };
    const std::vector<Tensor> running = l.buffers();
    EXPECT_LT(error_against_rms(values(y.f32(), numel), y_ref), 1e-5) << "y";
    EXPECT_LT(error_against_rms(values(dx.f32(), numel), dx_ref, &dx_terms), 1e-5) << "dx";
    EXPECT_LT(error_against_rms(values(running[0].f32(), k.c), mean_ref), 1e-6) << "running mean";
    EXPECT_LT(error_against_rms(values(running[1].f32(), k.c), var_ref), 1e-6) << "running variance";
    EXPECT_LT(error_against_rms(values(grads.f32(), k.c), dgamma_ref), 1e-5) << "dgamma";
    EXPECT_LT(error_against_rms(values(grads.f32() + k.c, k.c), dbeta_ref), 1e-5) << "dbeta";
  }
}

TEST(Gradients, SoftmaxCrossEntropy) {
  const std::int64_t n = 4, k = 5;
  Tensor z = Tensor::empty(Shape{n, k});
  fill_uniform(z, 10);
  const std::int32_t labels[n] = {0, 3, 4, 1};
  SoftmaxCrossEntropy ce;
  ce.forward(z, labels);
  Tensor dz = Tensor::empty(Shape{n, k});
  ce.backward(dz);
  for (std::int64_t i = 0; i < z.numel(); ++i) {
    const float saved = z.f32()[i];
    z.f32()[i] = saved + kEps;
    const double up = ce.forward(z, labels);
    z.f32()[i] = saved - kEps;
    const double down = ce.forward(z, labels);
    z.f32()[i] = saved;
    EXPECT_NEAR(dz.f32()[i], (up - down) / (2.0 * kEps), 1e-4) << "dz[" << i << "]";
  }
}

TEST(Loss, MatchesDirectFormulaAndCountsCorrect) {
  Tensor z = Tensor::empty(Shape{2, 3});
  const float vals[6] = {1.0f, 2.0f, 3.0f, 0.5f, -1.0f, 0.0f};
  std::copy(vals, vals + 6, z.f32());
  const std::int32_t labels[2] = {2, 1};
  SoftmaxCrossEntropy ce;
  const double loss = ce.forward(z, labels);
  const double l0 = -std::log(std::exp(3.0) / (std::exp(1.0) + std::exp(2.0) + std::exp(3.0)));
  const double l1 = -std::log(std::exp(-1.0) / (std::exp(0.5) + std::exp(-1.0) + std::exp(0.0)));
  EXPECT_NEAR(loss, (l0 + l1) / 2, 1e-6);
  EXPECT_EQ(ce.correct(), 1);
}

// GPT-2's vocabulary: the loss of a row against float64, the count from the first largest logit.
TEST(Loss, LargeVocabularyMatchesFloat64) {
  const std::int64_t n = 3, k = 50257;
  Tensor z = Tensor::empty(Shape{n, k});
  fill_uniform(z, 11);
  for (std::int64_t i = 0; i < z.numel(); ++i) z.f32()[i] *= 8.0f;
  const std::int32_t labels[n] = {17, 50256, 0};
  z.f32()[k + 50256] = 9.0f;  // row 1's largest logit is its label's
  double want = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float* row = z.f32() + i * k;
    double top = row[0], sum = 0.0;
    for (std::int64_t j = 0; j < k; ++j) top = std::max(top, static_cast<double>(row[j]));
    for (std::int64_t j = 0; j < k; ++j) sum += std::exp(row[j] - top);
    want += std::log(sum) - (row[labels[i]] - top);
  }
  SoftmaxCrossEntropy ce;
  EXPECT_NEAR(ce.forward(z, labels), want / n, 1e-5 * want / n);
  EXPECT_EQ(ce.correct(), 1);
  Tensor dz = Tensor::empty(Shape{n, k});
  ce.backward(dz);
  for (std::int64_t i = 0; i < n; ++i) {  // each gradient row sums to (1 - 1) / n, to float rounding
    double row_sum = 0.0;
    for (std::int64_t j = 0; j < k; ++j) row_sum += dz.f32()[i * k + j];
    EXPECT_NEAR(row_sum, 0.0, 1e-5) << "row " << i;
  }
}

TEST(Dropout, EvalIsIdentityAndTrainingScalesKeptUnits) {
  Dropout l(0.5, 0);
  l.configure(Shape{1000});
  Tensor x = Tensor::empty(Shape{1, 1000}), y = Tensor::empty(Shape{1, 1000});
  for (std::int64_t i = 0; i < 1000; ++i) x.f32()[i] = 1.0f;
  StepInfo eval{false, 1, 0, 0};
  l.forward(x, y, eval);
  for (std::int64_t i = 0; i < 1000; ++i) ASSERT_EQ(y.f32()[i], 1.0f);
  StepInfo train{true, 1, 0, 0};
  l.forward(x, y, train);
  int kept = 0;
  for (std::int64_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(y.f32()[i] == 0.0f || y.f32()[i] == 2.0f);
    kept += y.f32()[i] != 0.0f;
  }
  EXPECT_GT(kept, 400);
  EXPECT_LT(kept, 600);
}

}  // namespace
}  // namespace ringtrain
