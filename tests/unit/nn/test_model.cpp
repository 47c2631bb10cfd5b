// Model building from config: the example architectures' parameter and FLOP counts, and
// the errors a wrong model description gives.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/tensor/param_layout.hpp"
#include "unit/nn/model_text.hpp"

namespace ringtrain {
namespace {

// The example the README trains, so its advertised size is what is tested.
const std::string kCnnExample = std::string(RINGTRAIN_SOURCE_DIR) + "/examples/fashion_mnist/cnn.toml";

std::unique_ptr<Model> build_example(const std::string& path, const Shape& in) {
  Config c = Config::load_file(path);
  Config m = c.section("model");
  return build_model(m, in);
}

TEST(Model, CnnParametersAndFlops) {
  auto m = build_example(kCnnExample, Shape{1, 28, 28});
  EXPECT_EQ(m->num_params(), 421642);
  // conv1 2*32*9*784 + conv2 2*64*288*196 + fc 2*3136*128 + 2*128*10, times 3 for training
  EXPECT_EQ(m->train_flops_per_sample(), 3 * (451584 + 7225344 + 802816 + 2560));
  EXPECT_EQ(m->output_shape(), (Shape{10}));
}

TEST(Model, ForwardBackwardShapesAndDeterministicInit) {
  auto a = build_example(kCnnExample, Shape{1, 28, 28});
  auto b = build_example(kCnnExample, Shape{1, 28, 28});
  a->init_params(5);
  b->init_params(5);
  for (std::int64_t i = 0; i < a->arena_elements(); ++i) ASSERT_EQ(a->params().f32()[i], b->params().f32()[i]);
  b->init_params(6);
  EXPECT_NE(a->params().f32()[0], b->params().f32()[0]);
  Tensor x = Tensor::empty(Shape{3, 1, 28, 28});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = static_cast<float>(i % 17) / 17.0f;
  const Tensor& y = a->forward(x, StepInfo{});
  EXPECT_EQ(y.shape(), (Shape{3, 10}));
  Tensor dy = Tensor::empty(y.shape());
  dy.f32()[0] = 1.0f;
  a->backward(dy);
  double norm = 0.0;
  for (std::int64_t i = 0; i < a->arena_elements(); ++i) norm += std::fabs(a->grads().f32()[i]);
  EXPECT_GT(norm, 0.0);
}

// Odd shapes (out = 10, then 7, then 3): every parameter tensor still starts on a 256-byte
// boundary of the arenas (512 in the f32 master), the pads are not parameters, and the layers'
// views point where the offsets say.
TEST(Model, ParameterTensorsStartAlignedWhateverTheShapes) {
  auto m = build_model_text(
      "[[model.layers]]\ntype = \"linear\"\nout = 10\n[[model.layers]]\ntype = \"relu\"\n"
      "[[model.layers]]\ntype = \"linear\"\nout = 7\n[[model.layers]]\ntype = \"linear\"\nout = 3\n",
      Shape{13});
  const std::vector<Model::ParamTensor> tensors = m->param_tensors();
  ASSERT_EQ(tensors.size(), 6u);
  std::int64_t sum = 0;
  for (const Model::ParamTensor& t : tensors) {
    EXPECT_EQ(t.offset % ParamLayout::kAlignElements, 0) << t.name << " of layer " << t.layer;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(m->params().f32() + t.offset) % 256, 0u);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(m->grads().f32() + t.offset) % 256, 0u);
    sum += t.shape.numel();
  }
  EXPECT_EQ(tensors[1].offset, 256) << "weight [10, 13] = 130 elements, then the bias at the next boundary";
  EXPECT_EQ(m->num_params(), 13 * 10 + 10 + 10 * 7 + 7 + 7 * 3 + 3);
  EXPECT_EQ(m->num_params(), sum);
  EXPECT_EQ(m->arena_elements(), tensors.back().offset + 3);
  EXPECT_EQ(m->param_layout().logical_elements(), sum);

  // The layers compute with the aligned views: zeroing the last bias through the arena changes
  // the output by exactly that bias.
  m->init_params(3);
  Tensor x = Tensor::empty(Shape{1, 13});
  for (std::int64_t i = 0; i < 13; ++i) x.f32()[i] = 0.1f * static_cast<float>(i);
  const Tensor& y = m->forward(x, StepInfo{});
  const std::vector<float> before(y.f32(), y.f32() + 3);
  const float bias0 = m->params().f32()[tensors.back().offset];
  m->params().f32()[tensors.back().offset] = 0.0f;
  EXPECT_FLOAT_EQ(m->forward(x, StepInfo{}).f32()[0], before[0] - bias0);
  EXPECT_EQ(m->forward(x, StepInfo{}).f32()[1], before[1]);
}

TEST(Model, LinearAfterConvNeedsFlatten) {
  try {
    build_model_text(
        "[[model.layers]]\ntype = \"conv2d\"\nout_channels = 4\n[[model.layers]]\ntype = \"linear\"\nout = 3\n",
        Shape{1, 8, 8});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers[1]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("flatten"), std::string::npos) << e.what();
  }
}

TEST(Model, UnknownLayerTypeAndUnknownLayerKey) {
  EXPECT_THROW(build_model_text("[[model.layers]]\ntype = \"lstm\"\n", Shape{4}), ConfigError);
  try {
    build_model_text("[[model.layers]]\ntype = \"linear\"\nout = 3\nkernel = 3\n", Shape{4});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers[0].kernel"), std::string::npos) << e.what();
  }
}

TEST(Model, MissingRequiredLayerKey) {
  try {
    build_model_text("[[model.layers]]\ntype = \"linear\"\n", Shape{4});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers[0].out"), std::string::npos) << e.what();
  }
}

// A model too large for the host (2^48 parameters: more than a 47-bit address space holds, so no
// overcommit setting lets it through) says its size and its largest layer, not just "out of memory".
TEST(Model, AModelThatDoesNotFitSaysHowLargeItIs) {
  try {
    build_model_text("[[model.layers]]\ntype = \"linear\"\nout = 16777216\nname = \"huge\"\n", Shape{16777216});
    FAIL() << "a model of 2^48 parameters was allocated";
  } catch (const HostOutOfMemory& e) {
    EXPECT_NE(e.context().find("281474993487872 floats each"), std::string::npos) << e.context();
    EXPECT_NE(e.context().find("model.layers[0] (huge) with 281474993487872 parameters"), std::string::npos)
        << e.context();
  }
}

}  // namespace
}  // namespace ringtrain
