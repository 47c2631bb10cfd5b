// Model with a bf16/f16 compute dtype on the CPU: outputs close to f32 but not equal, every
// layer's output and every gradient exactly representable in the compute type, the f32
// master left untouched, and a change to the master seen by the next forward.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <utility>
#include <vector>

#include "ringtrain/core/config.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/tensor/rounding.hpp"
#include "unit/nn/model_text.hpp"

namespace ringtrain {
namespace {

// A small CNN touching every layer kind that changes values.
const std::vector<std::string> kLayers = {"type = \"conv2d\"\nout_channels = 4\n",
                                          "type = \"batchnorm2d\"\n",
                                          "type = \"relu\"\n",
                                          "type = \"maxpool2d\"\n",
                                          "type = \"flatten\"\n",
                                          "type = \"linear\"\nout = 16\n",
                                          "type = \"relu\"\n",
                                          "type = \"linear\"\nout = 10\n"};
const Shape kInput{1, 8, 8};

// The first `count` layers of kLayers.
std::unique_ptr<Model> build(std::size_t count, DType compute) {
  std::string text;
  for (std::size_t i = 0; i < count; ++i) text += "[[model.layers]]\n" + kLayers[i];
  auto model = build_model_text(text, kInput);
  model->init_params(3);
  model->set_compute_dtype(compute);
  return model;
}

Tensor input(std::int64_t n) {
  Tensor x = Tensor::empty(kInput.with_batch(n));
  for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = std::sin(0.37f * static_cast<float>(i)) * 1.7f;
  return x;
}

bool representable(float v, DType t) {
  float r = v;
  round_in_place(&r, 1, t);
  return r == v;
}

std::vector<float> values(const Tensor& t) { return std::vector<float>(t.f32(), t.f32() + t.numel()); }

TEST(MixedPrecision, Bf16OutputIsCloseToF32ButNotEqual) {
  auto f32 = build(kLayers.size(), DType::f32);
  auto bf16 = build(kLayers.size(), DType::bf16);
  const Tensor x = input(5);
  const std::vector<float> a = values(f32->forward(x, StepInfo{}));
  const std::vector<float> b = values(bf16->forward(x, StepInfo{}));
  double diff = 0.0, norm = 0.0;  // ||a - b|| / ||a||
  std::size_t differing = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(a[i]) * a[i];
    differing += a[i] != b[i] ? 1 : 0;
  }
  EXPECT_GT(differing, a.size() / 2) << "bf16 rounding had no effect";
  std::cout << "bf16 vs f32 logits: relative difference " << std::sqrt(diff / norm) << "\n";
  EXPECT_LT(std::sqrt(diff / norm), 1e-2);
}

TEST(MixedPrecision, EveryActivationAndGradientIsRepresentable) {
  for (DType t : {DType::bf16, DType::f16}) {
    // Each prefix of the network ends in another layer: its output is that layer's activation.
    for (std::size_t count = 1; count <= kLayers.size(); ++count) {
      auto m = build(count, t);
      const Tensor& y = m->forward(input(3), StepInfo{});
      for (std::int64_t i = 0; i < y.numel(); ++i)
        ASSERT_TRUE(representable(y.f32()[i], t))
            << dtype_name(t) << " layer " << count - 1 << " output " << i << " = " << y.f32()[i];
      if (m->arena_elements() == 0) continue;
      Tensor dy = Tensor::empty(y.shape());
      for (std::int64_t i = 0; i < dy.numel(); ++i) dy.f32()[i] = std::cos(0.11f * static_cast<float>(i)) * 0.3f;
      round_in_place(dy.f32(), dy.numel(), t);
      m->backward(dy);
      std::int64_t nonzero = 0;
      for (std::int64_t i = 0; i < m->arena_elements(); ++i) {
        const float g = m->grads().f32()[i];
        ASSERT_TRUE(representable(g, t)) << dtype_name(t) << " gradient " << i << " = " << g;
        nonzero += g != 0.0f ? 1 : 0;
      }
      EXPECT_GT(nonzero, 0);
    }
  }
}

TEST(MixedPrecision, MasterStaysF32AndItsChangesAreSeen) {
  auto m = build(kLayers.size(), DType::bf16);
  std::int64_t not_bf16 = 0;
  for (std::int64_t i = 0; i < m->arena_elements(); ++i)
    not_bf16 += representable(m->params().f32()[i], DType::bf16) ? 0 : 1;
  EXPECT_GT(not_bf16, m->arena_elements() / 2);  // random f32 values are almost never bf16 values
  const std::vector<float> master = values(m->params());
  const Tensor x = input(4);
  const std::vector<float> y1 = values(m->forward(x, StepInfo{}));
  const std::vector<float> after = values(std::as_const(*m).params());
  EXPECT_EQ(after, master) << "the forward changed the f32 master";

  // Change the master as an optimizer step, a restore or a broadcast would (through params()).
  float* p = m->params().f32();
  for (std::int64_t i = 0; i < m->arena_elements(); ++i) p[i] *= 0.5f;
  const std::vector<float> y2 = values(m->forward(x, StepInfo{}));
  EXPECT_NE(y1, y2) << "the forward used stale compute parameters";
  // ... and the result is what a model built with those master values computes.
  auto fresh = build(kLayers.size(), DType::bf16);
  std::copy(p, p + m->arena_elements(), fresh->params().f32());
  EXPECT_EQ(values(fresh->forward(x, StepInfo{})), y2);
}

TEST(MixedPrecision, F16OverflowGivesInfLikeRealFp16) {
  // A convolution of inputs and weights that fp16 holds, whose sums it does not.
  for (DType t : {DType::f16, DType::f32}) {
    auto m = build(1, t);
    float* p = m->params().f32();
    for (std::int64_t i = 0; i < m->arena_elements(); ++i) p[i] = 1.0f;
    Tensor x = Tensor::empty(kInput.with_batch(2));
    for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 30000.0f;
    const Tensor& y = m->forward(x, StepInfo{});
    EXPECT_EQ(has_nonfinite(y.f32(), y.numel()), t == DType::f16) << dtype_name(t);
  }
}

}  // namespace
}  // namespace ringtrain
