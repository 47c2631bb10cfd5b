// The layers of a GPT-2 style transformer against float64 references written here with plain
// loops (and their config keys): the f32 forward must match the
// reference, and the analytic backward (dx and every parameter gradient) must match central
// differences, in float64, of L = sum(reference(x, params) * r) for a fixed random r.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain {
namespace {

using Values = std::vector<double>;
// The reference forward: batch input (flat) and parameters (flat, in param_specs order) -> y.
using Reference = std::function<Values(const Values& x, const std::vector<Values>& params)>;

constexpr double kForwardRel = 1e-5;
constexpr double kFdStep = 1e-6;
constexpr double kGradRel = 1e-4;
constexpr double kGradAbs = 1e-5;

// Uniform in [lo, hi), rounded to float so the layer and the reference see the same values.
Values uniform(std::int64_t n, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Rng rng(seed);
  Values v(static_cast<std::size_t>(n));
  for (double& e : v) e = static_cast<float>(lo + (hi - lo) * rng.uniform());
  return v;
}

// A layer bound to its own parameter and gradient arenas, with a float64 check of its
// forward and backward.
struct Check {
  Layer& layer;
  Shape in_sample, out_sample;
  std::int64_t batch;
  std::vector<ParamSpec> specs;
  Tensor params, grads;
  std::vector<Tensor> param_views, grad_views;

  Check(Layer& l, const Shape& in, std::int64_t n) : layer(l), in_sample(in), batch(n) {
    out_sample = layer.configure(in);
    specs = layer.param_specs();
    std::int64_t total = 0;
    for (const auto& s : specs) total += s.shape.numel();
    params = Tensor::empty(Shape{std::max<std::int64_t>(total, 1)});
    grads = Tensor::empty(Shape{std::max<std::int64_t>(total, 1)});
    std::int64_t off = 0;
    for (const auto& s : specs) {
      param_views.push_back(params.flat_slice(off, s.shape));
      grad_views.push_back(grads.flat_slice(off, s.shape));
      off += s.shape.numel();
    }
    layer.bind(param_views, grad_views);
  }

  void set_params(const std::vector<Values>& values) {
    ASSERT_EQ(values.size(), specs.size());
    for (std::size_t p = 0; p < specs.size(); ++p) {
      ASSERT_EQ(static_cast<std::int64_t>(values[p].size()), specs[p].shape.numel()) << specs[p].name;
      for (std::size_t i = 0; i < values[p].size(); ++i) param_views[p].f32()[i] = static_cast<float>(values[p][i]);
    }
  }

  Tensor input(const Values& x) const {
    Tensor t = Tensor::empty(in_sample.with_batch(batch));
    EXPECT_EQ(static_cast<std::int64_t>(x.size()), t.numel());
    for (std::size_t i = 0; i < x.size(); ++i) t.f32()[i] = static_cast<float>(x[i]);
    return t;
  }

  // Forward against the reference, then backward against finite differences. x holds the
  // f32 input (empty for a token input, which then comes as `x_tensor` and gets no gradient).
  void run(const Values& x, const std::vector<Values>& p, const Reference& ref, const Tensor* token_input = nullptr) {
    set_params(p);
    const Tensor xt = token_input != nullptr ? *token_input : input(x);
    Tensor y = Tensor::empty(out_sample.with_batch(batch));
    layer.forward(xt, y, StepInfo{});
    const Values y_ref = ref(x, p);
    ASSERT_EQ(static_cast<std::int64_t>(y_ref.size()), y.numel());
    double scale = 0.0;
    for (const double v : y_ref) scale = std::max(scale, std::fabs(v));
    for (std::size_t i = 0; i < y_ref.size(); ++i)
      EXPECT_NEAR(y.f32()[i], y_ref[i], kForwardRel * (std::fabs(y_ref[i]) + 1e-2 * scale))
          << layer.kind() << " y[" << i << "]";

    const Values r = uniform(y.numel(), 99);
    Tensor dy = Tensor::empty(y.shape());
    for (std::size_t i = 0; i < r.size(); ++i) dy.f32()[i] = static_cast<float>(r[i]);
    // Garbage first: backward must overwrite the gradients, not add to them.
    for (std::int64_t i = 0; i < grads.numel(); ++i) grads.f32()[i] = 1e3f;
    Tensor dx = Tensor::empty(in_sample.with_batch(batch));
    for (std::int64_t i = 0; i < dx.numel(); ++i) dx.f32()[i] = 1e3f;
    layer.backward(xt, y, dy, token_input != nullptr ? nullptr : &dx);

    const auto loss = [&](const Values& xv, const std::vector<Values>& pv) {
      const Values yv = ref(xv, pv);
      double s = 0.0;
      for (std::size_t i = 0; i < yv.size(); ++i) s += yv[i] * r[i];
      return s;
    };
    const auto compare = [&](double analytic, double numeric, const std::string& what) {
      EXPECT_NEAR(analytic, numeric, kGradAbs + kGradRel * std::fabs(numeric)) << layer.kind() << " " << what;
    };
    if (token_input == nullptr) {
      Values xv = x;
      for (std::size_t i = 0; i < xv.size(); ++i) {
        const double saved = xv[i];
        xv[i] = saved + kFdStep;
        const double up = loss(xv, p);
        xv[i] = saved - kFdStep;
        const double down = loss(xv, p);
        xv[i] = saved;
        compare(dx.f32()[i], (up - down) / (2 * kFdStep), "dx[" + std::to_string(i) + "]");
      }
    }
    std::vector<Values> pv = p;
    for (std::size_t k = 0; k < pv.size(); ++k)
      for (std::size_t i = 0; i < pv[k].size(); ++i) {
        const double saved = pv[k][i];
        pv[k][i] = saved + kFdStep;
        const double up = loss(x, pv);
        pv[k][i] = saved - kFdStep;
        const double down = loss(x, pv);
        pv[k][i] = saved;
        compare(grad_views[k].f32()[i], (up - down) / (2 * kFdStep),
                "d" + specs[k].name + "[" + std::to_string(i) + "]");
      }
  }
};

// ---- float64 references -------------------------------------------------------------------

// y[r, o] = sum_i x[r, i] w[o, i] + b[o] over rows r.
Values ref_linear(const Values& x, const Values& w, const Values* b, std::int64_t in, std::int64_t out) {
  const auto rows = static_cast<std::int64_t>(x.size()) / in;
  Values y(static_cast<std::size_t>(rows * out));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = b != nullptr ? (*b)[o] : 0.0;
      for (std::int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

// ---- Linear over sequences ----------------------------------------------------------------

TEST(TransformerLayers, LinearOverSequence) {
  const std::int64_t n = 2, t = 5, in = 6, out = 4;
  Linear l(out, true);
  Check c(l, Shape{t, in}, n);
  EXPECT_EQ(c.out_sample, (Shape{t, out}));
  EXPECT_EQ(l.forward_flops_per_sample(), 2 * t * in * out);
  c.run(uniform(n * t * in, 1), {uniform(out * in, 2), uniform(out, 3)},
        [&](const Values& x, const std::vector<Values>& p) { return ref_linear(x, p[0], &p[1], in, out); });
}

TEST(TransformerLayers, LinearOverSequenceWithoutBias) {
  const std::int64_t n = 2, t = 3, in = 5, out = 7;
  Linear l(out, false);
  Check c(l, Shape{t, in}, n);
  c.run(uniform(n * t * in, 4), {uniform(out * in, 5)},
        [&](const Values& x, const std::vector<Values>& p) { return ref_linear(x, p[0], nullptr, in, out); });
}

TEST(TransformerLayers, LinearRankThreeNeedsFlatten) {
  Linear l(4, true);
  try {
    l.configure(Shape{2, 3, 4});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("flatten"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ringtrain
