// `ringtrain bench prune`: what structured pruning buys. The MLP of a config is initialised,
// a fraction of each hidden layer's neurons is pruned by L2 norm and the kept ones are copied
// into a really smaller MLP; after checking both compute the same logits, forward + backward
// of the dense and the shrunk model are timed alternately (medians, one JSON line on rank 0).
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "bench/bench_stats.hpp"
#include "ringtrain/bench/bench.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/layers.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/prune/pruner.hpp"
#include "ringtrain/runtime/context.hpp"

namespace ringtrain {
namespace {

using Clock = std::chrono::steady_clock;

// The config's model with each linear layer's width replaced by `outs` (empty: as configured),
// through the same overrides as `--set model.layers[i].out=N`.
std::unique_ptr<Model> build_mlp(const std::string& path, const std::vector<std::int64_t>& outs, const Shape& input,
                                 const std::vector<std::size_t>& linear_layers) {
  ConfigOverrides widths;
  for (std::size_t i = 0; i < outs.size(); ++i)
    widths.set.push_back(fmt::format("model.layers[{}].out={}", linear_layers[i], outs[i]));
  Config config = Config::load_file(path, widths);
  Config model = config.section("model");
  return build_model(model, input);
}

// The indices of the model's linear layers; only MLPs (parameters in linear layers only) shrink.
std::vector<std::size_t> linear_layers_of(const Model& model, const std::string& path) {
  std::vector<std::size_t> linear;
  for (const auto& t : model.param_tensors()) {
    RT_REQUIRE(t.kind == "linear", ConfigError,
               "bench prune: {}: layer {} is a {}: only MLPs (flatten, linear, relu, dropout) can be shrunk", path,
               t.layer, t.kind);
    if (t.name == "weight") linear.push_back(t.layer);
  }
  return linear;
}

// Milliseconds per training forward + loss + backward, averaged over `iterations` steps.
double step_ms(Model& model, const Tensor& x, const std::vector<std::int32_t>& labels, int iterations) {
  SoftmaxCrossEntropy loss;
  Tensor dlogits = Tensor::empty(Shape{x.shape()[0], model.output_shape()[0]});
  const auto t0 = Clock::now();
  for (int i = 0; i < iterations; ++i) {
    loss.forward(model.forward(x, StepInfo{true, 0, i, 0}), labels.data());
    loss.backward(dlogits);
    model.backward(dlogits);
  }
  return 1e3 * std::chrono::duration<double>(Clock::now() - t0).count() / iterations;
}

}  // namespace

void bench_prune(Context& ctx, const PruneBenchOptions& o) {
  ctx.bind(Device::cpu, o.threads);
  const Shape input{std::vector<std::int64_t>(o.input)};
  auto dense = build_mlp(o.config, {}, input, {});
  const std::vector<std::size_t> linear_layers = linear_layers_of(*dense, o.config);
  dense->init_params(1);
  float* p = dense->params().f32();
  Tensor mask = Tensor::empty(Shape{dense->arena_elements()});
  std::fill_n(mask.f32(), mask.numel(), 1.0f);
  const auto tensors = dense->param_tensors();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (t.name != "weight" || t.layer == tensors.back().layer) continue;  // the output layer keeps its classes
    NeuronRange r{t.offset, t.shape[0], t.shape[1], -1};
    if (i + 1 < tensors.size() && tensors[i + 1].layer == t.layer) r.bias_offset = tensors[i + 1].offset;
    mask_smallest_neurons(p, mask.f32(), r, o.fraction);
  }
  for (std::int64_t i = 0; i < dense->arena_elements(); ++i) p[i] *= mask.f32()[i];
  const std::vector<std::int64_t> kept = kept_neurons_per_linear(*dense, mask.f32());
  auto shrunk = build_mlp(o.config, kept, input, linear_layers);
  copy_kept_neurons(*dense, mask.f32(), *shrunk);

  Tensor x = Tensor::empty(input.with_batch(o.batch));
  Rng rng(stream_key(1, 0x9e11));
  for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = rng.uniform();
  std::vector<std::int32_t> labels(static_cast<std::size_t>(o.batch));
  const auto classes = static_cast<std::int32_t>(dense->output_shape()[0]);
  for (auto& l : labels) l = static_cast<std::int32_t>(rng.next() % static_cast<std::uint64_t>(classes));
  StepInfo eval;
  eval.training = false;
  const Tensor dense_out = dense->forward(x, eval);
  const Tensor& shrunk_out = shrunk->forward(x, eval);
  double max_diff = 0.0, max_abs = 0.0;
  for (std::int64_t i = 0; i < dense_out.numel(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(dense_out.f32()[i] - shrunk_out.f32()[i])));
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(dense_out.f32()[i])));
  }
  RT_REQUIRE(max_diff <= 1e-5 * std::max(max_abs, 1.0), Error,
             "bench prune: the shrunk model's logits differ from the masked dense model's by {}", max_diff);

  std::vector<double> dense_ms, shrunk_ms;
  step_ms(*dense, x, labels, 2);  // warm-up: activation buffers, BLAS threads
  step_ms(*shrunk, x, labels, 2);
  for (int r = 0; r < o.repeats; ++r) {
    dense_ms.push_back(step_ms(*dense, x, labels, o.iterations));
    shrunk_ms.push_back(step_ms(*shrunk, x, labels, o.iterations));
  }
  const double d = median(dense_ms), s = median(shrunk_ms);
  nlohmann::json j = {{"bench", "prune"},
                      {"config", o.config},
                      {"neurons_pruned_fraction", o.fraction},
                      {"batch", o.batch},
                      {"threads", ctx.binding().threads},
                      {"dense_params", dense->num_params()},
                      {"shrunk_params", shrunk->num_params()},
                      {"kept_neurons_per_linear", kept},
                      {"dense_train_flops_per_sample", dense->train_flops_per_sample()},
                      {"shrunk_train_flops_per_sample", shrunk->train_flops_per_sample()},
                      {"max_logit_difference", max_diff},
                      {"dense_step_ms", d},
                      {"shrunk_step_ms", s},
                      {"speedup", d / s},
                      {"dense_step_ms_runs", dense_ms},
                      {"shrunk_step_ms_runs", shrunk_ms}};
  log::info("{}", j.dump());
}

}  // namespace ringtrain
