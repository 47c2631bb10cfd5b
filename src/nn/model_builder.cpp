// build_model: [[model.layers]] tables -> layers; the layer keys are declared once below. Each
// layer type reads only its own keys (others are refused by Config::finish, naming the type).
#include "cuda/gpu_backend.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"
#include "ringtrain/nn/model.hpp"
#include "nn/gpt_family.hpp"
#include "nn/layer_maker.hpp"

namespace ringtrain {
namespace {

class CpuLayerMaker final : public LayerMaker {
 public:
  std::unique_ptr<Layer> linear(std::int64_t out, bool bias, double init_std) override {
    return std::make_unique<Linear>(out, bias, init_std);
  }
  std::unique_ptr<Layer> conv2d(const Conv2dOptions& o) override { return make_cpu_conv2d(o); }
  std::unique_ptr<Layer> relu() override { return std::make_unique<ReLU>(); }
  std::unique_ptr<Layer> maxpool2d(std::int64_t k, std::int64_t s) override {
    return std::make_unique<MaxPool2d>(k, s);
  }
  std::unique_ptr<Layer> flatten() override { return std::make_unique<Flatten>(); }
  std::unique_ptr<Layer> dropout(double p, int index) override { return std::make_unique<Dropout>(p, index); }
  std::unique_ptr<Layer> batchnorm2d(double momentum, double eps) override {
    return std::make_unique<BatchNorm2d>(momentum, eps);
  }
  std::unique_ptr<Layer> add() override { return std::make_unique<Add>(); }
  std::unique_ptr<Layer> embedding(std::int64_t vocab_size, std::int64_t block_size, std::int64_t n_embd) override {
    return std::make_unique<Embedding>(vocab_size, block_size, n_embd);
  }
  std::unique_ptr<Layer> layernorm(double eps) override { return std::make_unique<LayerNorm>(eps); }
  std::unique_ptr<Layer> gelu() override { return std::make_unique<Gelu>(); }
  std::unique_ptr<Layer> attention(std::int64_t n_head) override {
    return std::make_unique<CausalSelfAttention>(n_head);
  }
};

// The keys of one [[model.layers]] table; each layer type reads only its own.
const EnumKey<std::string> kType(
    {.name = "model.layers[].type",
     .doc = "the layer; the model is the tables in order, each reading the previous one's output "
            "unless `inputs` names others; the last one's output is the model's (for "
            "classification a `linear` with one output per class)",
     .required = true},
    "linear",
    {{"linear", "linear"},
     {"add", "add"},
     {"conv2d", "conv2d"},
     {"relu", "relu"},
     {"maxpool2d", "maxpool2d"},
     {"flatten", "flatten"},
     {"dropout", "dropout"},
     {"batchnorm2d", "batchnorm2d"},
     {"embedding", "embedding"},
     {"layernorm", "layernorm"},
     {"gelu", "gelu"},
     {"attention", "attention"}});
const StringKey kName({.name = "model.layers[].name",
                       .doc = "the name of this layer's output, for later layers' `inputs`"},
                      "");
const StringListKey kInputs({.name = "model.layers[].inputs",
                             .doc = "the values this layer reads: `\"input\"` (the model's input) or earlier "
                                    "layers' names; two for `add`",
                             .default_doc = "the previous layer's output"},
                            {});
const EnumKey<std::string> kFamily({.name = "model.family",
                                    .doc = "`layers`: the [[model.layers]] tables; `gpt`: a GPT-2 style language model "
                                           "from the `n_layer`, `n_head`, `n_embd`, `block_size`... keys"},
                                   "layers", {{"layers", "layers"}, {"gpt", "gpt"}});
const IntKey kVocabSize({.name = "model.layers[].vocab_size",
                         .doc = "token ids the table embeds",
                         .range = {1, std::int64_t{1} << 31},
                         .required = true,
                         .read_when = {"model.layers[].type", {"embedding"}}},
                        0);
const IntKey kBlockSize({.name = "model.layers[].block_size",
                         .doc = "longest input (rows of the position table)",
                         .range = {1, std::int64_t{1} << 20},
                         .required = true,
                         .read_when = {"model.layers[].type", {"embedding"}}},
                        0);
const IntKey kNEmbd({.name = "model.layers[].n_embd",
                     .doc = "embedding width",
                     .range = {1, std::int64_t{1} << 16},
                     .required = true,
                     .read_when = {"model.layers[].type", {"embedding"}}},
                    0);
const IntKey kNHead({.name = "model.layers[].n_head",
                     .doc = "attention heads (the input is [T, 3C] q|k|v; C a multiple of n_head)",
                     .range = {1, 1024},
                     .required = true,
                     .read_when = {"model.layers[].type", {"attention"}}},
                    0);
const IntKey kOut({.name = "model.layers[].out",
                   .doc = "output features",
                   .range = Range::at_least(1),
                   .required = true,
                   .read_when = {"model.layers[].type", {"linear"}}},
                  0);
const BoolKey kBias({.name = "model.layers[].bias",
                     .doc = "add a learned bias",
                     .read_when = {"model.layers[].type", {"linear", "conv2d"}}},
                    true);
const IntKey kOutChannels({.name = "model.layers[].out_channels",
                           .doc = "output channels",
                           .range = Range::at_least(1),
                           .required = true,
                           .read_when = {"model.layers[].type", {"conv2d"}}},
                          0);
const IntKey kKernel({.name = "model.layers[].kernel",
                      .doc = "square window side",
                      .range = Range::at_least(1),
                      .default_doc = "`3` (conv2d), `2` (maxpool2d)",
                      .read_when = {"model.layers[].type", {"conv2d", "maxpool2d"}}},
                     3);
const IntKey kStride({.name = "model.layers[].stride",
                      .doc = "window step",
                      .range = Range::at_least(1),
                      .default_doc = "`1` (conv2d), the kernel (maxpool2d)",
                      .read_when = {"model.layers[].type", {"conv2d", "maxpool2d"}}},
                     1);
const IntKey kPadding({.name = "model.layers[].padding",
                       .doc = "zero padding on each side",
                       .range = Range::at_least(0),
                       .read_when = {"model.layers[].type", {"conv2d"}}},
                      0);
const NumberKey kDropoutP({.name = "model.layers[].p",
                           .doc = "probability of zeroing an activation (training only)",
                           .range = Range::fraction(),
                           .read_when = {"model.layers[].type", {"dropout"}}},
                          0.5);
const NumberKey kBnMomentum({.name = "model.layers[].momentum",
                             .doc = "running statistics' update factor",
                             .range = {0.0, 1.0},
                             .read_when = {"model.layers[].type", {"batchnorm2d"}}},
                            0.1);
const NumberKey kBnEps({.name = "model.layers[].eps",
                        .doc = "variance term",
                        .range = Range::above(0),
                        .read_when = {"model.layers[].type", {"batchnorm2d", "layernorm"}}},
                       1e-5);

std::unique_ptr<Layer> make_layer(Config& c, int index, LayerMaker& maker) {
  const std::string type = c.get(kType);
  if (type == "linear") return maker.linear(c.get(kOut), c.get(kBias));
  if (type == "conv2d") {
    Conv2dOptions o;
    o.out_channels = c.get(kOutChannels);
    o.kernel = c.get(kKernel);
    o.stride = c.get(kStride);
    o.padding = c.get(kPadding);
    o.bias = c.get(kBias);
    return maker.conv2d(o);
  }
  if (type == "relu") return maker.relu();
  if (type == "maxpool2d") {
    const std::int64_t k = c.get(kKernel, std::int64_t{2});
    return maker.maxpool2d(k, c.get(kStride, k));
  }
  if (type == "flatten") return maker.flatten();
  if (type == "add") return maker.add();
  if (type == "embedding") return maker.embedding(c.get(kVocabSize), c.get(kBlockSize), c.get(kNEmbd));
  if (type == "layernorm") return maker.layernorm(c.get(kBnEps));
  if (type == "gelu") return maker.gelu();
  if (type == "attention") return maker.attention(c.get(kNHead));
  if (type == "dropout") return maker.dropout(c.get(kDropoutP), index);
  return maker.batchnorm2d(c.get(kBnMomentum), c.get(kBnEps));
}

}  // namespace

std::int64_t model_block_size(Config& model_config) {
  return model_config.get(kFamily) == "gpt" ? gpt_block_size(model_config) : 0;
}

std::string model_init_from(Config& model_config) {
  return model_config.get(kFamily) == "gpt" ? gpt_init_from(model_config) : std::string();
}

std::unique_ptr<LayerMaker> make_cpu_layer_maker() { return std::make_unique<CpuLayerMaker>(); }

std::unique_ptr<Model> build_model(Config& model_config, const Shape& input_shape, const ComputeOptions& compute,
                                   std::int64_t data_vocab_size) {
  std::vector<ModelNode> nodes;
  const std::unique_ptr<LayerMaker> maker =
      compute.device == Device::cuda ? gpu("runtime.backend=cuda").make_layer_maker(compute.precision, compute.tf32)
                                     : make_cpu_layer_maker();
  if (model_config.get(kFamily) == "gpt") {
    nodes = gpt_nodes(read_gpt_config(model_config, data_vocab_size), *maker);
  } else {
    int index = 0;
    for (auto& lc : model_config.table_array("layers")) {
      try {
        nodes.push_back({make_layer(lc, index, *maker), lc.get(kName), lc.get(kInputs), {}});
      } catch (const ConfigError& e) {
        const std::string msg = e.what();
        if (msg.rfind("config:", 0) == 0) throw;
        throw ConfigError(fmt::format("config: {}: {}: {}", lc.source(), lc.path_of("type"), msg));
      }
      ++index;
    }
  }
  auto model = std::make_unique<Model>(std::move(nodes), input_shape, compute.device);
  model->set_compute_dtype(compute.precision);
  return model;
}

}  // namespace ringtrain
