// Models as graphs: named values, the residual add, gradients summed over a value's readers
// (checked against finite differences of the whole model), and the errors a wrong graph gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/layers.hpp"
#include "ringtrain/nn/model.hpp"
#include "unit/nn/model_text.hpp"

namespace ringtrain {
namespace {

std::string error_of(const std::string& text, const Shape& in) {
  try {
    build_model_text(text, in);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

// h = linear(x); a = linear(relu(h)); y = linear(a + h + h): h has three readers (one of them
// reads it twice), so its gradient is a sum the model assembles.
const char* kResidual = R"(
[[model.layers]]
type = "linear"
out = 5
name = "h"
[[model.layers]]
type = "relu"
[[model.layers]]
type = "linear"
out = 5
name = "a"
[[model.layers]]
type = "add"
inputs = ["a", "h"]
name = "s"
[[model.layers]]
type = "add"
inputs = ["s", "h"]
[[model.layers]]
type = "linear"
out = 3
)";

double weighted_output(Model& m, const Tensor& x, const Tensor& r) {
  const Tensor& y = m.forward(x, StepInfo{});
  double s = 0.0;
  for (std::int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(y.f32()[i]) * r.f32()[i];
  return s;
}

// The gradient of every parameter of `m` against central differences of sum(y * r).
void expect_gradients_match(Model& m, const Tensor& x, const Tensor& r) {
  weighted_output(m, x, r);
  m.backward(r);
  const Tensor analytic = Tensor::empty(m.grads().shape());
  copy_into(analytic, m.grads());
  constexpr float kEps = 1e-2f;
  for (std::int64_t i = 0; i < m.arena_elements(); ++i) {
    float* p = m.params().f32() + i;
    const float saved = *p;
    *p = saved + kEps;
    const double up = weighted_output(m, x, r);
    *p = saved - kEps;
    const double down = weighted_output(m, x, r);
    *p = saved;
    const double numeric = (up - down) / (2.0 * kEps);
    EXPECT_NEAR(analytic.f32()[i], numeric, 2e-3 + 1e-2 * std::fabs(numeric)) << "parameter " << i;
  }
}

TEST(GraphModel, ResidualGradientsMatchFiniteDifferences) {
  auto m = build_model_text(kResidual, Shape{4});
  m->init_params(3);
  Rng rng(5);
  Tensor x = Tensor::empty(Shape{2, 4});
  Tensor r = Tensor::empty(Shape{2, 3});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 2.0f * rng.uniform() - 1.0f;
  for (std::int64_t i = 0; i < r.numel(); ++i) r.f32()[i] = 2.0f * rng.uniform() - 1.0f;
  expect_gradients_match(*m, x, r);
}

// Flatten and an identity Dropout (p = 0, or any p outside training) pass their input through:
// the model hands readers a view and, where the input has no other reader, the output's gradient
// buffer as the input's. The results are bitwise those of the model without them, with no
// activation or gradient memory of their own; where the input has another reader the gradient
// takes the copying path, and is the same sum.
std::unique_ptr<Model> chain(std::vector<std::unique_ptr<Layer>> layers,
                             std::vector<std::vector<std::string>> inputs = {}) {
  std::vector<ModelNode> nodes;
  for (std::size_t i = 0; i < layers.size(); ++i)
    nodes.push_back({std::move(layers[i]),
                     "v" + std::to_string(i),
                     i < inputs.size() ? inputs[i] : std::vector<std::string>{},
                     {}});
  auto m = std::make_unique<Model>(std::move(nodes), Shape{4});
  m->init_params(7);
  return m;
}

template <typename... L>
std::vector<std::unique_ptr<Layer>> layers(std::unique_ptr<L>... l) {
  std::vector<std::unique_ptr<Layer>> out;
  (out.push_back(std::move(l)), ...);
  return out;
}

// Forward and backward of `a` and `b` (b given a's parameters) give the same bits.
void expect_same_training(Model& a, Model& b, const Tensor& x, const Tensor& r) {
  ASSERT_EQ(a.arena_elements(), b.arena_elements());
  copy_into(b.params(), a.params());
  const Tensor& ya = a.forward(x, StepInfo{});
  const Tensor& yb = b.forward(x, StepInfo{});
  ASSERT_EQ(ya.numel(), yb.numel());
  EXPECT_EQ(std::memcmp(ya.raw(), yb.raw(), ya.nbytes()), 0) << "outputs differ";
  a.backward(r);
  b.backward(r);
  EXPECT_EQ(std::memcmp(a.grads().raw(), b.grads().raw(), a.grads().nbytes()), 0) << "gradients differ";
}

TEST(GraphModel, PassThroughLayersAreViewsWithTheSameResults) {
  Rng rng(12);
  Tensor x = Tensor::empty(Shape{3, 4});
  Tensor r = Tensor::empty(Shape{3, 3});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 2.0f * rng.uniform() - 1.0f;
  for (std::int64_t i = 0; i < r.numel(); ++i) r.f32()[i] = 2.0f * rng.uniform() - 1.0f;
  auto plain = [] { return chain(layers(std::make_unique<Linear>(6, true), std::make_unique<Linear>(3, true))); };
  auto reference = plain();

  auto viewed = chain(layers(std::make_unique<Linear>(6, true), std::make_unique<Flatten>(),
                             std::make_unique<Dropout>(0.0, 2), std::make_unique<Linear>(3, true)));
  expect_same_training(*viewed, *reference, x, r);
  EXPECT_EQ(viewed->activation_bytes(), reference->activation_bytes()) << "no buffers of their own";

  // h read by the dropout and the add: the dropout's gradient is copied and added, as add(h, h)'s
  auto shared = chain(layers(std::make_unique<Linear>(6, true), std::make_unique<Dropout>(0.0, 1),
                             std::make_unique<Add>(), std::make_unique<Linear>(3, true)),
                      {{}, {"v0"}, {"v1", "v0"}});
  auto doubled =
      chain(layers(std::make_unique<Linear>(6, true), std::make_unique<Add>(), std::make_unique<Linear>(3, true)),
            {{}, {"v0", "v0"}});
  expect_same_training(*shared, *doubled, x, r);
  expect_gradients_match(*shared, x, r);

  // Dropout with p > 0 is a view outside training only: evaluation, training (its mask), evaluation.
  auto dropped = chain(
      layers(std::make_unique<Linear>(6, true), std::make_unique<Dropout>(0.5, 1), std::make_unique<Linear>(3, true)));
  copy_into(reference->params(), dropped->params());
  StepInfo eval;
  eval.training = false;
  const Tensor expected = Tensor::empty(Shape{3, 3});
  copy_into(expected, reference->forward(x, eval));
  auto same_as_expected = [&](const Tensor& y) { return std::memcmp(y.raw(), expected.raw(), y.nbytes()) == 0; };
  EXPECT_TRUE(same_as_expected(dropped->forward(x, eval)));
  EXPECT_FALSE(same_as_expected(dropped->forward(x, StepInfo{}))) << "half the hidden units dropped";
  EXPECT_TRUE(same_as_expected(dropped->forward(x, eval)));
}

// y = W2 W x with W2 tied to W: one 4x4 weight used twice, its gradient the sum of both uses
// (no activation between them: a ReLU kink inside the finite difference would blur the check).
TEST(GraphModel, TiedWeightsGetTheSumOfBothGradients) {
  std::vector<ModelNode> nodes;
  nodes.push_back({std::make_unique<Linear>(4, false), "a", {}, {}});
  nodes.push_back({std::make_unique<Linear>(4, false), "", {}, {ParamTie{0, "a", 0}}});
  Model m(std::move(nodes), Shape{4});
  EXPECT_EQ(m.num_params(), 16);  // stored once
  EXPECT_EQ(m.param_tensors().size(), 1u);
  m.init_params(9);
  Rng rng(4);
  Tensor x = Tensor::empty(Shape{3, 4});
  Tensor r = Tensor::empty(Shape{3, 4});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 2.0f * rng.uniform() - 1.0f;
  for (std::int64_t i = 0; i < r.numel(); ++i) r.f32()[i] = 2.0f * rng.uniform() - 1.0f;
  expect_gradients_match(m, x, r);
}

// A language model's LM head tied to its token table: the table's gradient is summed by rows
// after the embedding's backward (the head's rows first, then the embedding's; repeated tokens
// too), with no scratch copy; buckets may be cut where the table ends.
TEST(GraphModel, TiedTokenTableGetsBothGradientsWithoutAScratch) {
  std::vector<ModelNode> nodes;
  nodes.push_back({std::make_unique<Embedding>(5, 3, 4), "wte", {}, {}});
  nodes.push_back({std::make_unique<Linear>(5, false), "", {}, {ParamTie{0, "wte", 0}}});
  Model m(std::move(nodes), Shape{3});
  EXPECT_EQ(m.tied_gradient_bytes(), 0);
  EXPECT_EQ(m.gradient_cuts(), (std::vector<std::int64_t>{0, std::int64_t{5} * 4}));  // the table, then the positions
  m.init_params(6);
  Tensor x = Tensor::empty(Shape{2, 3}, DType::i32);
  const std::int32_t tokens[] = {1, 3, 1, 4, 0, 1};
  std::copy(std::begin(tokens), std::end(tokens), x.data<std::int32_t>());
  Rng rng(8);
  Tensor r = Tensor::empty(Shape{2, 3, 5});
  for (std::int64_t i = 0; i < r.numel(); ++i) r.f32()[i] = 2.0f * rng.uniform() - 1.0f;
  expect_gradients_match(m, x, r);
  expect_gradients_match(m, x, r);  // a second backward overwrites, it does not add to the first
}

// Layers as above that cannot compute gradient rows on their own: the tie then goes through the
// model's scratch, the reference for the row blocks.
class WholeGradientEmbedding final : public Embedding {
 public:
  using Embedding::Embedding;
  bool param_grad_rows_supported(std::size_t /*param*/) const override { return false; }
};

// A token table of several gradient blocks (70,000 x 4: two blocks of 65,536 rows at most): the
// buckets may be cut between them, and the gradient the row blocks sum, delivered block by block
// from the last down, is the scratch path's to rounding.
TEST(GraphModel, ATiedTableOfSeveralBlocksIsSummedBlockByBlock) {
  constexpr std::int64_t kVocab = 70000, kWidth = 4, kT = 3;
  auto make = [&](bool by_rows) {
    std::vector<ModelNode> nodes;
    if (by_rows)
      nodes.push_back({std::make_unique<Embedding>(kVocab, kT, kWidth), "wte", {}, {}});
    else
      nodes.push_back({std::make_unique<WholeGradientEmbedding>(kVocab, kT, kWidth), "wte", {}, {}});
    nodes.push_back({std::make_unique<Linear>(kVocab, false), "", {}, {ParamTie{0, "wte", 0}}});
    auto m = std::make_unique<Model>(std::move(nodes), Shape{kT});
    m->init_params(6);
    return m;
  };
  auto rows = make(true), scratch = make(false);
  const std::int64_t block = Model::kGradientBlockElements / kWidth * kWidth;
  EXPECT_EQ(rows->gradient_cuts(), (std::vector<std::int64_t>{0, block, kVocab * kWidth}));
  EXPECT_GT(scratch->tied_gradient_bytes(), 0);
  Tensor x = Tensor::empty(Shape{2, kT}, DType::i32);
  const std::int32_t tokens[] = {69999, 3, 69999, 65536, 0, 65535};  // repeated, and on both sides of the cut
  std::copy(std::begin(tokens), std::end(tokens), x.data<std::int32_t>());
  Rng rng(8);
  Tensor r = Tensor::empty(Shape{2, kT, kVocab});
  for (std::int64_t i = 0; i < r.numel(); ++i) r.f32()[i] = 2.0f * rng.uniform() - 1.0f;
  const StepInfo info{true, 1, 0, 0};
  rows->forward(x, info);
  scratch->forward(x, info);
  std::vector<std::int64_t> ready;
  rows->backward(r, [&](std::int64_t from) { ready.push_back(from); });
  scratch->backward(r);
  // The positions first (the head has no parameters of its own), then the blocks from the last down.
  EXPECT_EQ(ready, (std::vector<std::int64_t>{kVocab * kWidth, block, 0, 0}));
  ASSERT_EQ(rows->arena_elements(), scratch->arena_elements());
  int wrong = 0;
  for (std::int64_t i = 0; i < rows->arena_elements(); ++i) {
    const float a = rows->grads().f32()[i], b = scratch->grads().f32()[i];
    wrong += std::fabs(a - b) <= 1e-6f * (1.0f + std::fabs(b)) ? 0 : 1;
  }
  EXPECT_EQ(wrong, 0);
}

TEST(GraphModel, TiesNeedAnEarlierOwnerOfTheSameShape) {
  std::vector<ModelNode> nodes;
  nodes.push_back({std::make_unique<Linear>(4, false), "a", {}, {}});
  nodes.push_back({std::make_unique<Linear>(3, false), "", {}, {ParamTie{0, "a", 0}}});
  EXPECT_THROW(Model(std::move(nodes), Shape{4}), ConfigError);
  std::vector<ModelNode> unknown;
  unknown.push_back({std::make_unique<Linear>(4, false), "a", {}, {ParamTie{0, "b", 0}}});
  EXPECT_THROW(Model(std::move(unknown), Shape{4}), ConfigError);
}

TEST(GraphModel, AddSumsItsInputs) {
  auto m = build_model_text(kResidual, Shape{4});
  EXPECT_EQ(m->num_layers(), 6u);
  EXPECT_EQ(m->output_shape(), (Shape{3}));
  EXPECT_NE(m->describe().find("add(2, 0) s"), std::string::npos) << m->describe();
  // 3 linear layers: 4*5+5, 5*5+5, 5*3+3
  EXPECT_EQ(m->num_params(), 25 + 30 + 18);
}

TEST(GraphModel, TheDescriptionsColumnsLineUpWhateverTheNames) {
  const auto m = build_model_text(
      "[[model.layers]]\ntype = \"linear\"\nout = 4\nname = \"first_projection\"\n[[model.layers]]\ntype = \"relu\"\n"
      "name = \"r\"\n[[model.layers]]\ntype = \"add\"\ninputs = [\"r\", \"first_projection\"]\n",
      Shape{4});
  std::istringstream lines(m->describe());
  std::set<std::size_t> arrows, params;
  for (std::string line; std::getline(lines, line);) {
    arrows.insert(line.find(" -> "));
    params.insert(line.find(" params"));
  }
  EXPECT_EQ(arrows.size(), 1u) << m->describe();
  EXPECT_EQ(params.size(), 1u) << m->describe();
}

TEST(GraphModel, SequentialConfigsReadThePreviousLayer) {
  auto m =
      build_model_text("[[model.layers]]\ntype = \"linear\"\nout = 3\n[[model.layers]]\ntype = \"relu\"\n", Shape{4});
  EXPECT_EQ(m->describe().find('('), std::string::npos) << m->describe();
}

TEST(GraphModel, GradientsShareBuffersWhenTheirLivesDoNotOverlap) {
  std::string deep;
  for (int i = 0; i < 6; ++i)
    deep += "[[model.layers]]\ntype = \"linear\"\nout = 8\n[[model.layers]]\ntype = \"relu\"\n";
  EXPECT_EQ(build_model_text(deep, Shape{4})->gradient_buffers(), 2u);  // ping-pong, whatever the depth
  // the residual net: h's gradient lives through the whole backward of the block beside it
  EXPECT_EQ(build_model_text(kResidual, Shape{4})->gradient_buffers(), 3u);
}

// One training forward and backward of both models on the same random input x and output
// gradient r (uniform in [-1, 1) from `seed`): the same outputs and gradients bit for bit, with
// fewer activation bytes in `fused` (the absorbed layers' buffers). Returns x.
Tensor expect_same_bits_with_fewer_buffers(Model& fused, Model& apart, const Shape& x_shape, const Shape& r_shape,
                                           std::uint64_t seed) {
  Tensor x = Tensor::empty(x_shape), r = Tensor::empty(r_shape);
  Rng rng(seed);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 2.0f * rng.uniform() - 1.0f;
  for (std::int64_t i = 0; i < r.numel(); ++i) r.f32()[i] = 2.0f * rng.uniform() - 1.0f;
  const Tensor& a = apart.forward(x, StepInfo{});
  const Tensor& f = fused.forward(x, StepInfo{});
  EXPECT_EQ(std::memcmp(a.raw(), f.raw(), a.nbytes()), 0) << "forward";
  EXPECT_LT(fused.activation_bytes(), apart.activation_bytes());
  apart.backward(r);
  fused.backward(r);
  EXPECT_EQ(std::memcmp(apart.grads().raw(), fused.grads().raw(), apart.grads().nbytes()), 0) << "gradients";
  return x;
}

// A ReLU's own subclass, which a max-pool does not absorb: the model computing every layer apart.
class SeparateReLU final : public ReLU {};

std::vector<ModelNode> conv_relu_pool(std::unique_ptr<Layer> relu) {
  std::vector<ModelNode> nodes;
  Conv2dOptions conv;
  conv.out_channels = 3;
  conv.padding = 1;
  nodes.push_back({std::make_unique<Conv2d>(conv), "", {}, {}});
  nodes.push_back({std::move(relu), "", {}, {}});
  nodes.push_back({std::make_unique<MaxPool2d>(2, 2), "", {}, {}});
  nodes.push_back({std::make_unique<Flatten>(), "", {}, {}});
  nodes.push_back({std::make_unique<Linear>(4, true), "", {}, {}});
  return nodes;
}

// conv -> relu -> maxpool: the max-pool does the ReLU's work (no pass, no buffer of its own),
// and the logits and every gradient are the model's computing each layer apart, bit for bit.
TEST(GraphModel, AMaxPoolAbsorbsTheReLUBeforeItBitForBit) {
  Model fused(conv_relu_pool(std::make_unique<ReLU>()), Shape{2, 6, 6});
  Model apart(conv_relu_pool(std::make_unique<SeparateReLU>()), Shape{2, 6, 6});
  EXPECT_EQ(fused.layer_done_by(1), 2u);
  EXPECT_EQ(apart.layer_done_by(1), 1u);
  EXPECT_NE(fused.describe().find("0 params  (done by [2])\n  [2] maxpool2d "), std::string::npos) << fused.describe();
  for (Model* m : {&fused, &apart}) m->init_params(4);
  expect_same_bits_with_fewer_buffers(fused, apart, Shape{3, 2, 6, 6}, Shape{3, 4}, 12);
}

std::vector<ModelNode> linear_relu_stack(const std::function<std::unique_ptr<Layer>()>& relu) {
  std::vector<ModelNode> nodes;
  nodes.push_back({std::make_unique<Linear>(6, true), "", {}, {}});
  nodes.push_back({relu(), "", {}, {}});
  nodes.push_back({std::make_unique<Linear>(5, false), "", {}, {}});
  nodes.push_back({relu(), "", {}, {}});
  nodes.push_back({std::make_unique<Linear>(4, true), "", {}, {}});
  return nodes;
}

// linear -> relu (twice, with and without a bias): each linear does the ReLU after it in place
// (no pass, no buffer of the ReLU's), and the logits and every gradient are the model's computing
// each layer apart, bit for bit: also for a sample with a NaN (which passes the ReLU either way)
// and in emulated bf16.
TEST(GraphModel, ALinearAbsorbsTheReLUAfterItBitForBit) {
  for (const DType compute : {DType::f32, DType::bf16}) {
    Model fused(linear_relu_stack([] { return std::make_unique<ReLU>(); }), Shape{7});
    Model apart(linear_relu_stack([] { return std::make_unique<SeparateReLU>(); }), Shape{7});
    EXPECT_EQ(fused.layer_done_by(1), 0u);
    EXPECT_EQ(fused.layer_done_by(3), 2u);
    EXPECT_EQ(apart.layer_done_by(1), 1u);
    EXPECT_NE(fused.describe().find("0 params  (done by [0])\n  [2] linear "), std::string::npos) << fused.describe();
    for (Model* m : {&fused, &apart}) {
      m->init_params(5);
      m->set_compute_dtype(compute);
    }
    Tensor x = Tensor::empty(Shape{3, 7}), r = Tensor::empty(Shape{3, 4});
    Rng rng(13);
    for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 2.0f * rng.uniform() - 1.0f;
    for (std::int64_t i = 0; i < r.numel(); ++i) r.f32()[i] = 2.0f * rng.uniform() - 1.0f;
    x.f32()[9] = std::nanf("");  // sample 1
    const Tensor& a = apart.forward(x, StepInfo{});
    const Tensor& f = fused.forward(x, StepInfo{});
    ASSERT_EQ(std::memcmp(a.raw(), f.raw(), a.nbytes()), 0) << dtype_name(compute);
    EXPECT_TRUE(std::isnan(f.f32()[4])) << "the NaN passes the ReLU";
    EXPECT_LT(fused.activation_bytes(), apart.activation_bytes());  // no ReLU output buffers
    apart.backward(r);
    fused.backward(r);
    ASSERT_EQ(std::memcmp(apart.grads().raw(), fused.grads().raw(), apart.grads().nbytes()), 0) << dtype_name(compute);
  }
}

std::vector<ModelNode> basic_block(const std::function<std::unique_ptr<Layer>()>& relu) {
  std::vector<ModelNode> nodes;
  Conv2dOptions conv;
  conv.out_channels = 3;
  conv.padding = 1;
  conv.bias = false;
  nodes.push_back({std::make_unique<Conv2d>(conv), "", {}, {}});
  nodes.push_back({std::make_unique<BatchNorm2d>(0.1, 1e-5), "", {}, {}});
  nodes.push_back({relu(), "stem", {}, {}});
  nodes.push_back({std::make_unique<Conv2d>(conv), "", {}, {}});
  nodes.push_back({std::make_unique<BatchNorm2d>(0.1, 1e-5), "f", {}, {}});
  nodes.push_back({std::make_unique<Add>(), "", {"stem", "f"}, {}});
  nodes.push_back({relu(), "", {}, {}});
  nodes.push_back({std::make_unique<Flatten>(), "", {}, {}});
  nodes.push_back({std::make_unique<Linear>(4, true), "", {}, {}});
  return nodes;
}

// A ResNet basic block, conv-bn-relu-conv-bn, added to its input, then a ReLU: the first batch
// norm and the add each do the ReLU after them (no pass, no buffer of the ReLU's), and the
// logits (training and evaluation) and every gradient are the model's computing each layer
// apart, bit for bit.
TEST(GraphModel, ABatchNormAndAnAddAbsorbTheReLUAfterThemBitForBit) {
  Model fused(basic_block([] { return std::make_unique<ReLU>(); }), Shape{2, 5, 7});
  Model apart(basic_block([] { return std::make_unique<SeparateReLU>(); }), Shape{2, 5, 7});
  EXPECT_EQ(fused.layer_done_by(2), 1u);
  EXPECT_EQ(fused.layer_done_by(6), 5u);
  EXPECT_EQ(apart.layer_done_by(2), 2u);
  EXPECT_EQ(apart.layer_done_by(6), 6u);
  for (Model* m : {&fused, &apart}) m->init_params(6);
  const Tensor x = expect_same_bits_with_fewer_buffers(fused, apart, Shape{4, 2, 5, 7}, Shape{4, 4}, 14);
  StepInfo eval;
  eval.training = false;  // the running statistics the training pass left
  const Tensor& ae = apart.forward(x, eval);
  const Tensor& fe = fused.forward(x, eval);
  ASSERT_EQ(std::memcmp(ae.raw(), fe.raw(), ae.nbytes()), 0);
}

// The model's output stays its last node's: a ReLU there is not absorbed; nor is one whose
// linear's output something else reads too.
TEST(GraphModel, AReLUIsNotAbsorbedWhereItsInputOrOutputIsNeeded) {
  const std::string lin = "[[model.layers]]\ntype = \"linear\"\nout = 4\n";
  EXPECT_EQ(build_model_text(lin + "name = \"h\"\n[[model.layers]]\ntype = \"relu\"\n", Shape{3})->layer_done_by(1),
            1u);
  auto residual = build_model_text(lin +
                                       "name = \"h\"\n[[model.layers]]\ntype = \"relu\"\nname = \"r\"\n"
                                       "[[model.layers]]\ntype = \"add\"\ninputs = [\"h\", \"r\"]\n",
                                   Shape{3});
  EXPECT_EQ(residual->layer_done_by(1), 1u);
}

// A ReLU whose output something else reads too keeps its own pass (the other reader needs it).
TEST(GraphModel, AReLUWithTwoReadersIsNotAbsorbed) {
  auto m = build_model_text(
      "[[model.layers]]\ntype = \"relu\"\nname = \"r\"\n[[model.layers]]\ntype = \"maxpool2d\"\nkernel = 1\n"
      "name = \"p\"\n[[model.layers]]\ntype = \"add\"\ninputs = [\"p\", \"r\"]\n",
      Shape{1, 2, 2});
  EXPECT_EQ(m->layer_done_by(0), 0u);
}

// A Linear that records the producers the model asks it about (Layer::fuse_producer_gradient).
class AskingLinear final : public Linear {
 public:
  AskingLinear(std::int64_t out, std::vector<const Layer*>* asked) : Linear(out, true), asked_(asked) {}
  bool fuse_producer_gradient(Layer& producer) override {
    asked_->push_back(&producer);
    return false;
  }

 private:
  std::vector<const Layer*>* asked_;
};

// A layer is asked about a value's producer only where it alone reads that value, once, and the
// value's gradient is needed: not about a ReLU of the input (no gradient), a value read twice,
// a pass-through (Flatten: its gradient is its input's), nor a value another layer reads too.
TEST(GraphModel, ALayerIsAskedToFuseOnlyAProducerWhoseGradientItAloneWrites) {
  std::vector<const Layer*> asked;
  std::vector<ModelNode> nodes;
  const auto add = [&](std::unique_ptr<Layer> layer, std::string name, std::vector<std::string> inputs = {}) {
    const Layer* raw = layer.get();
    nodes.push_back({std::move(layer), std::move(name), std::move(inputs)});
    return raw;
  };
  const Layer* input_relu = add(std::make_unique<ReLU>(), "r");
  const Layer* first = add(std::make_unique<AskingLinear>(5, &asked), "a");   // reads r: no gradient
  const Layer* second = add(std::make_unique<AskingLinear>(5, &asked), "b");  // reads a alone
  add(std::make_unique<Flatten>(), "f");
  add(std::make_unique<AskingLinear>(5, &asked), "c");  // reads the pass-through f
  const Layer* twice = add(std::make_unique<AskingLinear>(5, &asked), "d");
  add(std::make_unique<Add>(), "e", {"d", "d"});  // d read twice
  const Layer* shared = add(std::make_unique<AskingLinear>(5, &asked), "g", {"e"});
  add(std::make_unique<AskingLinear>(5, &asked), "h", {"g"});  // g is also read by the add below
  add(std::make_unique<Add>(), "s", {"h", "g"});
  Model model(std::move(nodes), Shape{6});
  // Asked: b about a, and d about c (c's output, read by d alone), g about the add e; not c about
  // f, the add about d, h about g, nor a about the input's ReLU.
  EXPECT_NE(std::find(asked.begin(), asked.end(), first), asked.end());
  EXPECT_EQ(std::count(asked.begin(), asked.end(), input_relu), 0);
  EXPECT_EQ(std::count(asked.begin(), asked.end(), twice), 0);
  EXPECT_EQ(std::count(asked.begin(), asked.end(), shared), 0);
  EXPECT_EQ(std::count(asked.begin(), asked.end(), second), 0) << "its reader is the pass-through";
  EXPECT_EQ(asked.size(), 3u);
}

TEST(GraphModel, TheFewestSamplesATrainingForwardTakesNameTheLayerThatNeedsThem) {
  const std::string conv = "[[model.layers]]\ntype = \"conv2d\"\nout_channels = 2\nkernel = 3\n";
  const std::string tail =
      "[[model.layers]]\ntype = \"batchnorm2d\"\n[[model.layers]]\ntype = \"flatten\"\n"
      "[[model.layers]]\ntype = \"linear\"\nout = 4\n";
  std::string who;
  EXPECT_EQ(build_model_text(conv + tail, Shape{1, 3, 3})->min_training_batch(&who), 2);  // 3 x 3 -> 1 x 1
  EXPECT_EQ(who, "model.layers[1] (batchnorm2d)");
  EXPECT_EQ(build_model_text(conv + tail, Shape{1, 4, 3})->min_training_batch(), 1);  // 2 x 1 planes
}

TEST(GraphModel, OnlyADropoutWithPAboveZeroDrawsMasks) {
  const std::string lin = "[[model.layers]]\ntype = \"linear\"\nout = 4\n";
  const auto dropout = [](const char* p) { return fmt::format("[[model.layers]]\ntype = \"dropout\"\np = {}\n", p); };
  EXPECT_FALSE(build_model_text(lin, Shape{4})->has_dropout_masks());
  EXPECT_FALSE(build_model_text(lin + dropout("0.0") + lin, Shape{4})->has_dropout_masks());
  EXPECT_TRUE(build_model_text(lin + dropout("0.1") + lin, Shape{4})->has_dropout_masks());
}

TEST(GraphModel, WrongGraphsNameTheLayer) {
  const std::string lin = "[[model.layers]]\ntype = \"linear\"\nout = 4\nname = \"h\"\n";
  EXPECT_NE(error_of(lin + "[[model.layers]]\ntype = \"add\"\ninputs = [\"h\", \"g\"]\n", Shape{4})
                .find("model.layers[1]: input \"g\" is not"),
            std::string::npos);
  EXPECT_NE(error_of(lin + "[[model.layers]]\ntype = \"add\"\n", Shape{4}).find("add reads 2 inputs and names none"),
            std::string::npos);
  EXPECT_NE(error_of(lin + "[[model.layers]]\ntype = \"add\"\ninputs = [\"h\"]\n", Shape{4})
                .find("add reads 2 input(s), 1 given"),
            std::string::npos);
  // "" does not name the first unnamed layer (it read layer 0 here, silently)
  const std::string unnamed = "[[model.layers]]\ntype = \"linear\"\nout = 4\n";
  EXPECT_NE(error_of(unnamed + lin + "[[model.layers]]\ntype = \"add\"\ninputs = [\"\", \"h\"]\n", Shape{4})
                .find("model.layers[2]: an input name is empty"),
            std::string::npos);
  EXPECT_NE(error_of(lin + "[[model.layers]]\ntype = \"add\"\ninputs = [\"h\", \"input\"]\n", Shape{3})
                .find("the same shape, got [4] and [3]"),
            std::string::npos);
  EXPECT_NE(error_of(lin + lin, Shape{4}).find("model.layers[1]: name \"h\" is already used"), std::string::npos);
  EXPECT_NE(error_of("[[model.layers]]\ntype = \"relu\"\nname = \"input\"\n", Shape{4}).find("reserved"),
            std::string::npos);
  // a value nobody reads (the second layer reads the input, not the first layer)
  EXPECT_NE(error_of(lin + "[[model.layers]]\ntype = \"relu\"\ninputs = [\"input\"]\n", Shape{4})
                .find("model.layers[0]: its output is not read"),
            std::string::npos);
  // a layer cannot read a later one
  EXPECT_NE(error_of("[[model.layers]]\ntype = \"relu\"\ninputs = [\"h\"]\n" + lin, Shape{4})
                .find("model.layers[0]: input \"h\""),
            std::string::npos);
}

}  // namespace
}  // namespace ringtrain
