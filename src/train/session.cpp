// open_session: the set-up phases every training-like command shares. Each phase runs under
// run_collectively, so an error on any rank becomes the same one-line error on all of them.
#include "ringtrain/train/session.hpp"

#include <filesystem>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"

namespace ringtrain {
namespace {

void check_labels(const Dataset& d, std::int64_t classes, const std::string& key) {
  for (std::int64_t i = 0; i < d.size(); ++i) {
    if (d.label(i) >= 0 && d.label(i) < classes) continue;
    const DatasetFile& f = d.file_of(i);
    throw DataError(fmt::format("{}: {}: label {} at index {} out of range for a model with {} outputs", key, f.path,
                                d.label(i), i - f.first, classes));
  }
}

void open_config_and_comms(Context& ctx, Session& s, const ConfigOverrides& overrides) {
  s.config = std::make_unique<Config>(Config::load_file(s.config_path, overrides));
  s.tc = read_train_config(*s.config, std::filesystem::path(s.config_path).stem().string());
  ctx.bind(s.tc.backend, static_cast<int>(s.tc.threads));  // cuda without a GPU: the CPU, with a warning
  s.comms = make_run_comms(ctx, s.tc);
}

void open_datasets(Context& ctx, Session& s, SessionOptions::Data data) {
  const TrainConfig& tc = s.tc;
  DatasetSpec spec = tc.data.spec(tc.data.train);
  // Only the sample shape is needed: the stream strategy opens without reading samples.
  if (data == SessionOptions::Data::shape) spec.strategy = ReadStrategy::stream;
  s.train = for_data_key("data.train", [&] { return Dataset::open(ctx, spec); });
  if (data == SessionOptions::Data::shape) return;
  s.gpu_augment = augment_on_gpu(tc, ctx.binding().backend == "cuda", s.train->sample_type());
  if (!tc.data.test.empty())
    s.test = for_data_key("data.test", [&] { return Dataset::open(ctx, tc.data.spec(tc.data.test)); });
}

void build_model_and_optimizer(Context& ctx, Session& s, const SessionOptions& options) {
  const TrainConfig& tc = s.tc;
  Config model_config = s.config->section("model");
  s.model = build_model(model_config, s.train->sample_shape(), compute_options(tc, ctx));
  if (tc.precision == DType::f16) s.scaler = GradScaler(tc.loss_scale);
  const Shape& out = s.model->output_shape();
  RT_REQUIRE(out.rank() == 1, ConfigError, "config: {}: model output per sample is {}; the last layer must be linear",
             s.config_path, out.str());
  s.num_classes = out[0];
  if (options.data == SessionOptions::Data::samples) {
    check_labels(*s.train, s.num_classes, "data.train");
    if (s.test) {
      RT_REQUIRE(s.test->sample_shape() == s.train->sample_shape(), DataError,
                 "data.test: {}: samples are {} but data.train has {}", s.test->files().front().path,
                 s.test->sample_shape().str(), s.train->sample_shape().str());
      check_labels(*s.test, s.num_classes, "data.test");
    }
    s.steps_per_epoch = for_data_key("data.train", [&] {
      return loader_steps_per_epoch(s.train, loader_options(tc, ctx.world_size(), ctx.world_rank(), true));
    });
    s.total_steps = s.steps_per_epoch * tc.epochs;
    if (tc.max_steps > 0) s.total_steps = std::min(s.total_steps, tc.max_steps);
  }
  Config optim_config = s.config->section("optim");
  OptimSetup o =
      build_optimizer(optim_config, s.model->num_params(),
                      options.schedule_steps > 0 ? options.schedule_steps : s.total_steps, s.model->device());
  s.optimizer = std::move(o.optimizer);
  s.schedule = std::make_unique<LrSchedule>(o.schedule);
  if (s.config->has("prune")) {  // read only when present: other resolved configs stay as they were
    Config prune_config = s.config->section("prune");
    const PruneConfig pc = read_prune_config(prune_config);
    if (pc.enabled) s.pruner = std::make_unique<Pruner>(pc, *s.model, *s.optimizer, *s.comms.main, s.total_steps);
  }
  s.config->finish();
  s.resolved_config = s.config->to_toml();
}

}  // namespace

std::unique_ptr<Session> open_session(Context& ctx, const std::string& config_path, const ConfigOverrides& overrides,
                                      const SessionOptions& options) {
  auto s = std::make_unique<Session>();
  s->config_path = config_path;
  run_collectively(ctx, [&] { open_config_and_comms(ctx, *s, overrides); });
  run_collectively(ctx, [&] { open_datasets(ctx, *s, options.data); });
  run_collectively(ctx, [&] { build_model_and_optimizer(ctx, *s, options); });
  return s;
}

}  // namespace ringtrain
