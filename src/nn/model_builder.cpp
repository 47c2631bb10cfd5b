// build_model: [[model.layers]] tables -> layers. Each layer type reads only its own keys
// (everything else is reported as unknown by Config::finish).
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"
#include "ringtrain/nn/model.hpp"

namespace ringtrain {
namespace {

std::unique_ptr<Layer> make_layer(Config& c, int index) {
  const std::string type = c.require_string("type");
  if (type == "linear") return std::make_unique<Linear>(c.require_int("out"), c.get_bool("bias", true));
  if (type == "conv2d") {
    Conv2dOptions o;
    o.out_channels = c.require_int("out_channels");
    o.kernel = c.get_int("kernel", 3);
    o.stride = c.get_int("stride", 1);
    o.padding = c.get_int("padding", 0);
    o.bias = c.get_bool("bias", true);
    return std::make_unique<Conv2d>(o);
  }
  if (type == "relu") return std::make_unique<ReLU>();
  if (type == "maxpool2d") {
    const std::int64_t k = c.get_int("kernel", 2);
    return std::make_unique<MaxPool2d>(k, c.get_int("stride", k));
  }
  if (type == "flatten") return std::make_unique<Flatten>();
  if (type == "dropout") return std::make_unique<Dropout>(c.get_double("p", 0.5), index);
  if (type == "batchnorm2d")
    return std::make_unique<BatchNorm2d>(c.get_double("momentum", 0.1), c.get_double("eps", 1e-5));
  throw ConfigError(fmt::format("config: {}: {}: unknown layer type '{}' (known: linear, conv2d, relu, maxpool2d, "
                                "flatten, dropout, batchnorm2d)",
                                c.source(), c.path_of("type"), type));
}

}  // namespace

std::unique_ptr<Model> build_model(Config& model_config, const Shape& input_shape) {
  std::vector<std::unique_ptr<Layer>> layers;
  int index = 0;
  for (auto& lc : model_config.table_array("layers")) {
    try {
      layers.push_back(make_layer(lc, index));
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      if (msg.rfind("config:", 0) == 0) throw;
      throw ConfigError(fmt::format("config: {}: {}: {}", lc.source(), lc.path_of("type"), msg));
    }
    ++index;
  }
  return std::make_unique<Model>(std::move(layers), input_shape);
}

}  // namespace ringtrain
