// open_session: the set-up phases every training-like command shares. Each phase runs under
// run_collectively, so an error on any rank becomes the same one-line error on all of them.
#include "ringtrain/train/session.hpp"

#include <algorithm>
#include <csignal>
#include <filesystem>

#include "ringtrain/comm/watchdog.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/printable.hpp"
#include "ringtrain/core/test_hook.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/data/token_loader.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"
#include "ringtrain/train/data_parallel_step.hpp"

namespace ringtrain {
namespace {

void check_labels(const Dataset& d, std::int64_t classes, const std::string& key) {
  for (std::int64_t i = 0; i < d.size(); ++i) {
    if (d.label(i) >= 0 && d.label(i) < classes) continue;
    const DatasetFile& f = d.file_of(i);
    // Labels are held as int32, wider ones saturated: the bound stands for any value beyond it.
    const std::int32_t label = d.label(i);
    const std::string value = label == INT32_MAX   ? fmt::format(">= {}", label)
                              : label == INT32_MIN ? fmt::format("<= {}", label)
                                                   : std::to_string(label);
    throw DataError(fmt::format("{}: {}: label {} at index {} out of range for a model with {} outputs", key, f.path,
                                value, i - f.first, classes));
  }
}

void open_config_and_comms(Context& ctx, Session& s, const ConfigOverrides& overrides) {
  // Rank 0 reads the file and every rank parses its text: one read of the shared file system,
  // and the same text everywhere even if a rank would see another file under that path.
  std::string text;
  run_collectively(ctx, [&] {
    if (ctx.world_rank() == 0) text = Config::read_text(s.config_path);
  });
  s.config = std::make_unique<Config>(Config::parse(broadcast_text(ctx, text), s.config_path, overrides));
  s.tc = read_train_config(*s.config, std::filesystem::path(s.config_path).stem().string());
  ctx.bind(s.tc.backend, static_cast<int>(s.tc.threads));  // cuda without a GPU: the CPU, with a warning
  s.comms = make_run_comms(ctx, s.tc);
}

void open_token_datasets(Context& ctx, Session& s, SessionOptions::Data data) {
  const TrainConfig& tc = s.tc;
  TokenDatasetSpec spec = tc.data.token_spec(tc.data.train);
  if (data == SessionOptions::Data::shape) spec.strategy = ReadStrategy::stream;  // checks files, reads no tokens
  s.train_tokens = for_data_key("data.train", [&] { return TokenDataset::open(ctx, spec); });
  s.sample_shape = Shape{tc.data.block_size};
  if (data == SessionOptions::Data::shape || tc.data.test.empty()) return;
  s.test_tokens = for_data_key("data.test", [&] { return TokenDataset::open(ctx, tc.data.token_spec(tc.data.test)); });
  RT_REQUIRE(s.test_tokens->vocab_size() == s.train_tokens->vocab_size(), DataError,
             "data.test: {}: vocabulary of {} tokens, but data.train has {}", s.test_tokens->files().front().path,
             s.test_tokens->vocab_size(), s.train_tokens->vocab_size());
  // The same ids are other text under another tokenizer: the held-out loss would mean nothing.
  RT_REQUIRE(s.test_tokens->tokenizer() == s.train_tokens->tokenizer(), DataError,
             "data.test: {}: tokenizer '{}', but data.train's is '{}'", s.test_tokens->files().front().path,
             printable(s.test_tokens->tokenizer()), printable(s.train_tokens->tokenizer()));
}

void open_datasets(Context& ctx, Session& s, SessionOptions::Data data) {
  const TrainConfig& tc = s.tc;
  if (s.tokens()) return open_token_datasets(ctx, s, data);
  DatasetSpec spec = tc.data.spec(tc.data.train);
  // Only the sample shape is needed: the stream strategy opens without reading samples.
  if (data == SessionOptions::Data::shape) spec.strategy = ReadStrategy::stream;
  s.train = for_data_key("data.train", [&] { return Dataset::open(ctx, spec); });
  s.sample_shape = s.train->sample_shape();
  // h5py and NumPy pipelines often write [N, H, W, C]; ringtrain reads [N, C, H, W].
  const Shape& shape = s.sample_shape;
  if (shape.rank() == 3 && shape[0] > 4 && shape[2] <= 4 && ctx.world_rank() == 0)
    log::warn(
        "data.train: samples of {} are read as [C, H, W]: {} channels of {} x {}; if the file is channels-last "
        "([N, H, W, C]), store it as [N, C, H, W]",
        shape.str(), shape[0], shape[1], shape[2]);
  if (data == SessionOptions::Data::shape) return;
  s.gpu_augment = augment_on_gpu(tc, ctx.binding().backend == Device::cuda, s.train->sample_type());
  if (tc.data.test.empty()) return;
  s.test = for_data_key("data.test", [&] { return Dataset::open(ctx, tc.data.spec(tc.data.test)); });
  // uint8 is read as value / 255, every other type as stored: a test set of another kind than
  // the training set's would be evaluated on another scale.
  const bool train_u8 = s.train->sample_type() == SampleType::u8, test_u8 = s.test->sample_type() == SampleType::u8;
  RT_REQUIRE(train_u8 == test_u8, DataError,
             "data.test: {}: images are {} but data.train's are {}: uint8 is read as value / 255 and other types as "
             "stored, so the test set would be on another scale; store both as uint8 or both as another type",
             tc.data.test.front(), sample_type_name(s.test->sample_type()), sample_type_name(s.train->sample_type()));
}

// The model's output against the data: one class per label (images), or a [T, V] distribution
// over a vocabulary holding the data's (tokens).
void check_model_fits_data(const Session& s) {
  const Model& m = *s.model;
  std::string needy;
  const std::int64_t fewest = m.min_training_batch(&needy);
  RT_REQUIRE(s.tc.batch_size >= fewest, ConfigError,
             "train.batch_size = {}: {} needs {} or more samples per rank in training (a batch norm over 1 x 1 "
             "planes: one value per channel has no batch statistics)",
             s.tc.batch_size, needy, fewest);
  const Shape& out = m.output_shape();
  if (!s.tokens()) {
    RT_REQUIRE(m.input_dtype() != DType::i32, ConfigError,
               "config: {}: the model reads token ids (an embedding) but data.format = \"images\"", s.config_path);
    RT_REQUIRE(out.rank() == 1, ConfigError,
               "config: {}: model output per sample is {}; a classifier ends in one logit per class, [classes] (a "
               "linear layer, say; a flatten before it makes [C, H, W] one row)",
               s.config_path, out.str());
    return;
  }
  RT_REQUIRE(m.input_dtype() == DType::i32, ConfigError,
             "config: {}: data.format = \"tokens\" but the model does not read token ids (its first layer must be an "
             "embedding)",
             s.config_path);
  RT_REQUIRE(out.rank() == 2 && out[0] == s.sample_shape[0], ConfigError,
             "config: {}: model output per sample is {}; a language model gives [block_size, vocabulary] = [{}, ...]",
             s.config_path, out.str(), s.sample_shape[0]);
  RT_REQUIRE(out[1] >= s.train_tokens->vocab_size(), ConfigError,
             "config: {}: the model predicts {} tokens but {} has a vocabulary of {}", s.config_path, out[1],
             s.train_tokens->files().front().path, s.train_tokens->vocab_size());
}

// The arena ranges of the parameters optim.no_decay names, merged where adjacent.
std::vector<ArenaRange> no_decay_ranges(const Model& model, const std::vector<std::string>& kinds) {
  auto wanted = [&](std::string_view kind) { return std::find(kinds.begin(), kinds.end(), kind) != kinds.end(); };
  std::vector<ArenaRange> out;
  for (const Model::ParamTensor& t : model.param_tensors()) {
    const bool norm = t.kind == "layernorm" || t.kind == "batchnorm2d";
    const bool exempt = (wanted("bias") && t.name == "bias" && !norm) || (wanted("norm") && norm) ||
                        (wanted("position") && t.kind == "embedding" && t.name == "position") ||
                        (wanted("embedding") && t.kind == "embedding" && t.name == "weight");
    if (!exempt) continue;
    if (!out.empty() && out.back().end() == t.offset) {
      out.back().count += t.shape.numel();
    } else {
      out.push_back({t.offset, t.shape.numel()});
    }
  }
  return out;
}

std::int64_t steps_per_epoch(Context& ctx, const Session& s) {
  if (!s.tokens())
    return for_data_key("data.train", [&] {
      return loader_steps_per_epoch(s.train, loader_options(s.tc, ctx.world_size(), ctx.world_rank(), true));
    });
  TokenLoaderOptions o = token_loader_options(s.tc, ctx.world_size(), ctx.world_rank(), true);
  o.prefetch = 0;  // only the plan is wanted
  return for_data_key("data.train", [&] { return TokenLoader(s.train_tokens, o).steps_per_epoch(); });
}

void build_model_and_optimizer(Context& ctx, Session& s, const SessionOptions& options) {
  const TrainConfig& tc = s.tc;
  Config model_config = s.config->section("model");
  s.model = build_model(model_config, s.sample_shape, compute_options(tc, ctx),
                        s.train_tokens ? s.train_tokens->vocab_size() : 0);
  s.init_from = model_init_from(model_config);
  if (tc.precision == DType::f16) s.scaler = GradScaler(tc.loss_scale);
  check_model_fits_data(s);
  s.num_classes = s.model->output_shape().dims().back();
  if (options.data == SessionOptions::Data::samples) {
    if (!s.tokens()) {
      check_labels(*s.train, s.num_classes, "data.train");
      if (s.test) {
        RT_REQUIRE(s.test->sample_shape() == s.train->sample_shape(), DataError,
                   "data.test: {}: samples are {} but data.train has {}", s.test->files().front().path,
                   s.test->sample_shape().str(), s.train->sample_shape().str());
        check_labels(*s.test, s.num_classes, "data.test");
      }
    }
    s.steps_per_epoch = steps_per_epoch(ctx, s);
    s.total_steps = s.steps_per_epoch * tc.epochs;
    if (tc.max_steps > 0) s.total_steps = std::min(s.total_steps, tc.max_steps);
  }
  Config optim_config = s.config->section("optim");
  const StepOptions step = step_options(tc, ctx, *s.comms.gradient);
  OptimSetup o = build_optimizer(optim_config, s.model->arena_elements(),
                                 options.schedule_steps > 0 ? options.schedule_steps : s.total_steps, s.model->device(),
                                 s.tokens(), step_owned_ranges(*s.model, step, ctx.world_size(), ctx.world_rank()));
  s.optimizer = std::move(o.optimizer);
  s.optimizer->exempt_from_weight_decay(no_decay_ranges(*s.model, o.no_decay));
  s.clip_grad_norm = o.clip_grad_norm;
  s.schedule = std::make_unique<LrSchedule>(o.schedule);
  if (s.config->has("prune")) {  // read only when present: other resolved configs stay as they were
    Config prune_config = s.config->section("prune");
    const PruneConfig pc = read_prune_config(prune_config);
    if (pc.enabled) s.pruner = std::make_unique<Pruner>(pc, *s.model, *s.optimizer, *s.comms.main, s.total_steps);
  }
  s.config->finish();
  s.resolved_config = s.config->to_toml();
}

// The set-up stall test's hook: RINGTRAIN_TEST_STALL=<point>@<rank> stops that rank (SIGSTOP,
// as a rank stuck on a file system would) at that point.
void stall_point(const Context& ctx, const char* point) {
  test_hook("RINGTRAIN_TEST_STALL", point, ctx.world_rank(), SIGSTOP);
}

// Relative directories resolve against each rank's working directory: they must name the
// same place on every rank (absolute paths compared; whether the file system is shared is
// CheckpointDir's probe).
void require_same_directories(const Context& ctx, const TrainConfig& tc) {
  std::error_code ec;
  const std::string dirs = std::filesystem::absolute(tc.run_dir, ec).string() + "\n" +
                           std::filesystem::absolute(tc.checkpoint.dir, ec).string();
  require_same_on_all_ranks(ctx, "run.dir and checkpoint.dir as absolute paths (each rank's working directory)", dirs);
}

}  // namespace

std::unique_ptr<Session> open_session(Context& ctx, const std::string& config_path, const ConfigOverrides& overrides,
                                      const SessionOptions& options) {
  auto s = std::make_unique<Session>();
  s->config_path = config_path;
  run_collectively(ctx, [&] { open_config_and_comms(ctx, *s, overrides); });
  require_same_directories(ctx, s->tc);
  // From here the watchdog covers set-up too: a rank that stalls (a file system that stopped
  // answering, a stopped process) ends the job with a message instead of holding the others
  // in the phase's agreement forever. Reading the data may take one second per 20 MB more, of
  // all the files, not of one rank's shard: the ranks read their shards at once and share the
  // file system's bandwidth, so the budget assumes 20 MB/s in aggregate, however many ranks.
  Watchdog& watchdog = *s->comms.watchdog;
  {
    const TrainConfig& tc = s->tc;
    const double data_bytes = static_cast<double>(dataset_file_bytes(tc.data.train) +
                                                  (tc.data.test.empty() ? 0 : dataset_file_bytes(tc.data.test)));
    const WatchedScope watch(watchdog, "set-up: opening data.train and data.test",
                             Watchdog::scaled_by_bytes(tc.timeout_s, data_bytes, "of data files"));
    stall_point(ctx, "open-datasets");
    run_collectively(ctx, [&] { open_datasets(ctx, *s, options.data); });
  }
  {
    const WatchedScope watch(watchdog, "set-up: building the model and optimizer");
    run_collectively(ctx, [&] { build_model_and_optimizer(ctx, *s, options); });
  }
  // Overrides are each rank's own command line, defaults may come from its environment (the
  // Slurm job in run.dir): the training all ranks run must be one.
  require_same_on_all_ranks(ctx, "the resolved config (config file, --set/--unset, defaults from the environment)",
                            s->resolved_config);
  return s;
}

StepOptions session_step_options(const Session& s, const Context& ctx) {
  StepOptions o = step_options(s.tc, ctx, *s.comms.gradient);
  o.clip_grad_norm = s.clip_grad_norm;
  return o;
}

}  // namespace ringtrain
