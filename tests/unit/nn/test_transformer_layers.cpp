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

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/layers.hpp"
#include "ringtrain/nn/model.hpp"
#include "unit/nn/model_text.hpp"

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

Values ref_layernorm(const Values& x, const Values& w, const Values& b, std::int64_t c, double eps) {
  Values y(x.size());
  for (std::size_t r = 0; r < x.size() / c; ++r) {
    double mean = 0.0, var = 0.0;
    for (std::int64_t i = 0; i < c; ++i) mean += x[r * c + i];
    mean /= static_cast<double>(c);
    for (std::int64_t i = 0; i < c; ++i) var += (x[r * c + i] - mean) * (x[r * c + i] - mean);
    var /= static_cast<double>(c);
    for (std::int64_t i = 0; i < c; ++i) y[r * c + i] = (x[r * c + i] - mean) / std::sqrt(var + eps) * w[i] + b[i];
  }
  return y;
}

Values ref_gelu(const Values& x) {
  Values y(x.size());
  const double k = std::sqrt(2.0 / M_PI);
  for (std::size_t i = 0; i < x.size(); ++i)
    y[i] = 0.5 * x[i] * (1.0 + std::tanh(k * (x[i] + 0.044715 * std::pow(x[i], 3))));
  return y;
}

// x [N, T, 3C] -> y [N, T, C]: per (sample, head), causal softmax(q k^T / sqrt(hs)) v.
Values ref_attention(const Values& x, std::int64_t n, std::int64_t t, std::int64_t c, std::int64_t heads) {
  const std::int64_t hs = c / heads;
  Values y(static_cast<std::size_t>(n * t * c));
  const auto at = [&](std::int64_t b, std::int64_t pos, std::int64_t col) { return x[(b * t + pos) * 3 * c + col]; };
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < t; ++i) {
        Values s(static_cast<std::size_t>(i + 1));
        double m = -1e300;
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0.0;
          for (std::int64_t d = 0; d < hs; ++d) dot += at(b, i, h * hs + d) * at(b, j, c + h * hs + d);
          s[j] = dot / std::sqrt(static_cast<double>(hs));
          m = std::max(m, s[j]);
        }
        double z = 0.0;
        for (double& e : s) z += (e = std::exp(e - m));
        for (std::int64_t d = 0; d < hs; ++d) {
          double acc = 0.0;
          for (std::int64_t j = 0; j <= i; ++j) acc += s[j] / z * at(b, j, 2 * c + h * hs + d);
          y[(b * t + i) * c + h * hs + d] = acc;
        }
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

// ---- Embedding ----------------------------------------------------------------------------

TEST(TransformerLayers, Embedding) {
  const std::int64_t n = 2, t = 5, v = 11, block = 7, c = 8;
  Embedding e(v, block, c);
  EXPECT_EQ(e.input_dtype(), DType::i32);
  Check chk(e, Shape{t}, n);
  EXPECT_EQ(chk.out_sample, (Shape{t, c}));
  ASSERT_EQ(chk.specs.size(), 2u);
  EXPECT_EQ(chk.specs[0].shape, (Shape{v, c}));
  EXPECT_EQ(chk.specs[1].shape, (Shape{block, c}));
  EXPECT_EQ(chk.specs[0].init, ParamInit::normal);
  EXPECT_EQ(chk.specs[0].std, 0.02);
  // Token 3 appears three times (twice in one sample) and 10 = V - 1 once: the scatter-add
  // must sum repeated rows.
  const std::vector<std::int32_t> ids = {3, 0, 3, 10, 5, 7, 3, 1, 2, 9};
  Tensor tokens = Tensor::empty(Shape{n, t}, DType::i32);
  std::copy(ids.begin(), ids.end(), tokens.data<std::int32_t>());
  chk.run(
      {}, {uniform(v * c, 6), uniform(block * c, 7)},
      [&](const Values&, const std::vector<Values>& p) {
        Values y(static_cast<std::size_t>(n * t * c));
        for (std::int64_t b = 0; b < n; ++b)
          for (std::int64_t pos = 0; pos < t; ++pos)
            for (std::int64_t i = 0; i < c; ++i)
              y[(b * t + pos) * c + i] = p[0][ids[b * t + pos] * c + i] + p[1][pos * c + i];
        return y;
      },
      &tokens);
}

TEST(TransformerLayers, EmbeddingBadTokenId) {
  Embedding e(11, 8, 4);
  Check chk(e, Shape{3}, 1);
  Tensor y = Tensor::empty(Shape{1, 3, 4});
  for (const std::int32_t bad : {11, -1}) {
    Tensor tokens = Tensor::empty(Shape{1, 3}, DType::i32);
    tokens.data<std::int32_t>()[2] = bad;
    try {
      e.forward(tokens, y, StepInfo{});
      FAIL() << "expected DataError for token " << bad;
    } catch (const DataError& err) {
      const std::string msg = err.what();
      EXPECT_NE(msg.find(std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("11"), std::string::npos) << msg;
      EXPECT_NE(msg.find("vocabulary"), std::string::npos) << msg;
    }
  }
}

TEST(TransformerLayers, EmbeddingSequenceLongerThanBlock) {
  Embedding e(11, 8, 4);
  EXPECT_EQ(e.configure(Shape{8}), (Shape{8, 4}));
  try {
    e.configure(Shape{9});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& err) {
    const std::string msg = err.what();
    EXPECT_NE(msg.find('9'), std::string::npos) << msg;
    EXPECT_NE(msg.find("block_size = 8"), std::string::npos) << msg;
  }
  EXPECT_THROW(e.configure(Shape{2, 4}), ConfigError);
}

// ---- LayerNorm ----------------------------------------------------------------------------

TEST(TransformerLayers, LayerNorm) {
  const std::int64_t n = 2, t = 5, c = 8;
  const double eps = 1e-5;
  LayerNorm l(eps);
  Check chk(l, Shape{t, c}, n);
  EXPECT_EQ(chk.out_sample, (Shape{t, c}));
  EXPECT_EQ(chk.specs[0].init, ParamInit::ones);
  EXPECT_EQ(chk.specs[1].init, ParamInit::zeros);
  // Rows with an offset (mean far from zero) and a weight away from 1.
  Values x = uniform(n * t * c, 8);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t row = i / static_cast<std::size_t>(c);
    x[i] = static_cast<float>(x[i] + static_cast<double>(row) - 3.0);
  }
  chk.run(x, {uniform(c, 9, 0.5, 1.5), uniform(c, 10)},
          [&](const Values& xv, const std::vector<Values>& p) { return ref_layernorm(xv, p[0], p[1], c, eps); });
}

TEST(TransformerLayers, LayerNormOddWidthRankOne) {
  const std::int64_t n = 3, c = 13;  // not a multiple of the lane count: the tail loops run
  LayerNorm l(1e-5);
  Check chk(l, Shape{c}, n);
  chk.run(uniform(n * c, 11, -2.0, 2.0), {uniform(c, 12, 0.5, 1.5), uniform(c, 13)},
          [&](const Values& xv, const std::vector<Values>& p) { return ref_layernorm(xv, p[0], p[1], c, 1e-5); });
}

TEST(TransformerLayers, LayerNormConstantRow) {
  const std::int64_t c = 8;
  LayerNorm l(1e-5);
  Check chk(l, Shape{c}, 1);
  const Values w = uniform(c, 14, 0.5, 1.5), b = uniform(c, 15);
  chk.set_params({w, b});
  const Tensor x = chk.input(Values(c, 3.0));
  Tensor y = Tensor::empty(Shape{1, c});
  l.forward(x, y, StepInfo{});
  for (std::int64_t i = 0; i < c; ++i) EXPECT_EQ(y.f32()[i], static_cast<float>(b[i])) << i;  // x - mean = 0
  Tensor dy = Tensor::empty(Shape{1, c});
  for (std::int64_t i = 0; i < c; ++i) dy.f32()[i] = static_cast<float>(i) - 3.5f;
  Tensor dx = Tensor::empty(Shape{1, c});
  l.backward(x, y, dy, &dx);
  for (std::int64_t i = 0; i < c; ++i) {
    EXPECT_TRUE(std::isfinite(dx.f32()[i])) << i;
    EXPECT_EQ(chk.grad_views[0].f32()[i], 0.0f) << i;  // xhat = 0
    EXPECT_EQ(chk.grad_views[1].f32()[i], dy.f32()[i]) << i;
  }
}

// ---- GELU ---------------------------------------------------------------------------------

TEST(TransformerLayers, Gelu) {
  const std::int64_t n = 2, t = 5, c = 8;
  Gelu g;
  Check chk(g, Shape{t, c}, n);
  Values x = uniform(n * t * c, 16, -5.0, 5.0);
  // The tails (where the polynomial exp clamps), zero and values near it.
  const Values special = {-30.0, -12.0, -9.0, 0.0, 1e-4, -1e-4, 9.0, 30.0};
  std::copy(special.begin(), special.end(), x.begin());
  chk.run(x, {}, [](const Values& xv, const std::vector<Values>&) { return ref_gelu(xv); });
}

// ---- CausalSelfAttention ------------------------------------------------------------------

// Attention over n samples of t positions, width c, `heads` heads, on inputs uniform in [lo, hi):
// the output shape, the FLOP count, and forward and backward against the reference.
void check_attention(std::int64_t n, std::int64_t t, std::int64_t c, std::int64_t heads, std::uint64_t seed, double lo,
                     double hi) {
  CausalSelfAttention a(heads);
  Check chk(a, Shape{t, 3 * c}, n);
  EXPECT_EQ(chk.out_sample, (Shape{t, c}));
  EXPECT_EQ(a.forward_flops_per_sample(), 4 * t * t * c);
  chk.run(uniform(n * t * 3 * c, seed, lo, hi), {},
          [&](const Values& xv, const std::vector<Values>&) { return ref_attention(xv, n, t, c, heads); });
}

// Scores of a few units, so the softmax is far from uniform.
TEST(TransformerLayers, Attention) { check_attention(2, 5, 8, 2, 17, -2.0, 2.0); }

TEST(TransformerLayers, AttentionOneHeadLongerSequence) { check_attention(1, 11, 6, 1, 18, -1.5, 1.5); }

// Longer than the layer's row blocks (64 query rows, each block multiplied with the keys up to
// its last row only): three blocks, the last one ragged (dK and dV summed over the blocks that
// see each key).
TEST(TransformerLayers, AttentionOverSeveralRowBlocks) { check_attention(1, 140, 4, 2, 19, -1.5, 1.5); }

TEST(TransformerLayers, AttentionIsCausal) {
  const std::int64_t n = 2, t = 6, c = 8, changed = 3;
  CausalSelfAttention a(2);
  Check chk(a, Shape{t, 3 * c}, n);
  Values x = uniform(n * t * 3 * c, 19);
  Tensor y0 = Tensor::empty(Shape{n, t, c}), y1 = Tensor::empty(Shape{n, t, c});
  a.forward(chk.input(x), y0, StepInfo{});
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t i = 0; i < 3 * c; ++i) x[(b * t + changed) * 3 * c + i] += 0.5;
  a.forward(chk.input(x), y1, StepInfo{});
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t pos = 0; pos < t; ++pos) {
      double diff = 0.0;
      for (std::int64_t i = 0; i < c; ++i) {
        const std::int64_t k = (b * t + pos) * c + i;
        diff = std::max(diff, static_cast<double>(std::fabs(y0.f32()[k] - y1.f32()[k])));
      }
      if (pos < changed)
        EXPECT_EQ(diff, 0.0) << "sample " << b << " position " << pos;
      else
        EXPECT_GT(diff, 1e-4) << "sample " << b << " position " << pos;
    }
}

TEST(TransformerLayers, AttentionConfigErrors) {
  CausalSelfAttention three(3);
  try {
    three.configure(Shape{5, 24});  // C = 8
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("n_head = 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("n_embd = 8"), std::string::npos) << msg;
  }
  CausalSelfAttention two(2);
  EXPECT_THROW(two.configure(Shape{5, 25}), ConfigError);  // not q | k | v
  EXPECT_THROW(two.configure(Shape{24}), ConfigError);     // no sequence
  EXPECT_THROW(CausalSelfAttention(0), ConfigError);
}

// ---- The builder --------------------------------------------------------------------------

TEST(TransformerLayers, BuilderMakesABlock) {
  const std::string text =
      "[[model.layers]]\ntype = \"layernorm\"\neps = 1e-6\n"
      "[[model.layers]]\ntype = \"linear\"\nout = 24\n"
      "[[model.layers]]\ntype = \"attention\"\nn_head = 2\n"
      "[[model.layers]]\ntype = \"gelu\"\n"
      "[[model.layers]]\ntype = \"linear\"\nout = 3\n";
  auto model = build_model_text(text, Shape{5, 8});
  EXPECT_EQ(model->output_shape(), (Shape{5, 3}));
  EXPECT_EQ(model->num_params(), 2 * 8 + (8 * 24 + 24) + (8 * 3 + 3));
}

TEST(TransformerLayers, BuilderEmbeddingKeys) {
  auto model = build_model_text("[[model.layers]]\ntype = \"embedding\"\nvocab_size = 11\nblock_size = 8\nn_embd = 4\n",
                                Shape{6});
  EXPECT_EQ(model->output_shape(), (Shape{6, 4}));
  EXPECT_EQ(model->num_params(), 11 * 4 + 8 * 4);
  // Keys of other types are refused, naming the layer's key.
  try {
    build_model_text("[[model.layers]]\ntype = \"gelu\"\nn_head = 2\n", Shape{4});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers[0].n_head"), std::string::npos) << e.what();
  }
  try {
    build_model_text("[[model.layers]]\ntype = \"attention\"\n", Shape{5, 24});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers[0].n_head"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ringtrain
