// build_model: [[model.layers]] tables -> layers. Each layer type reads only its own keys
// (everything else is reported as unknown by Config::finish).
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"
#include "ringtrain/nn/model.hpp"
#include "nn/layer_maker.hpp"

namespace ringtrain {
namespace {

class CpuLayerMaker final : public LayerMaker {
 public:
  std::unique_ptr<Layer> linear(std::int64_t out, bool bias) override { return std::make_unique<Linear>(out, bias); }
  std::unique_ptr<Layer> conv2d(const Conv2dOptions& o) override { return std::make_unique<Conv2d>(o); }
  std::unique_ptr<Layer> relu() override { return std::make_unique<ReLU>(); }
  std::unique_ptr<Layer> maxpool2d(std::int64_t k, std::int64_t s) override {
    return std::make_unique<MaxPool2d>(k, s);
  }
  std::unique_ptr<Layer> flatten() override { return std::make_unique<Flatten>(); }
  std::unique_ptr<Layer> dropout(double p, int index) override { return std::make_unique<Dropout>(p, index); }
  std::unique_ptr<Layer> batchnorm2d(double momentum, double eps) override {
    return std::make_unique<BatchNorm2d>(momentum, eps);
  }
};

std::unique_ptr<Layer> make_layer(Config& c, int index, LayerMaker& maker) {
  const std::string type = c.require_string("type");
  if (type == "linear") return maker.linear(c.require_int("out"), c.get_bool("bias", true));
  if (type == "conv2d") {
    Conv2dOptions o;
    o.out_channels = c.require_int("out_channels");
    o.kernel = c.get_int("kernel", 3);
    o.stride = c.get_int("stride", 1);
    o.padding = c.get_int("padding", 0);
    o.bias = c.get_bool("bias", true);
    return maker.conv2d(o);
  }
  if (type == "relu") return maker.relu();
  if (type == "maxpool2d") {
    const std::int64_t k = c.get_int("kernel", 2);
    return maker.maxpool2d(k, c.get_int("stride", k));
  }
  if (type == "flatten") return maker.flatten();
  if (type == "dropout") return maker.dropout(c.get_double("p", 0.5), index);
  if (type == "batchnorm2d") return maker.batchnorm2d(c.get_double("momentum", 0.1), c.get_double("eps", 1e-5));
  throw ConfigError(
      fmt::format("config: {}: {}: unknown layer type '{}' (known: linear, conv2d, relu, maxpool2d, "
                  "flatten, dropout, batchnorm2d)",
                  c.source(), c.path_of("type"), type));
}

}  // namespace

std::unique_ptr<LayerMaker> make_cpu_layer_maker() { return std::make_unique<CpuLayerMaker>(); }

std::unique_ptr<Model> build_model(Config& model_config, const Shape& input_shape, const ComputeOptions& compute) {
  std::vector<std::unique_ptr<Layer>> layers;
  const std::unique_ptr<LayerMaker> maker =
      compute.device == Device::cuda ? make_cuda_layer_maker(compute.precision, compute.tf32) : make_cpu_layer_maker();
  int index = 0;
  for (auto& lc : model_config.table_array("layers")) {
    try {
      layers.push_back(make_layer(lc, index, *maker));
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      if (msg.rfind("config:", 0) == 0) throw;
      throw ConfigError(fmt::format("config: {}: {}: {}", lc.source(), lc.path_of("type"), msg));
    }
    ++index;
  }
  auto model = std::make_unique<Model>(std::move(layers), input_shape, compute.device);
  model->set_compute_dtype(compute.precision);
  return model;
}

}  // namespace ringtrain
