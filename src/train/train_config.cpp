// read_train_config: defaults, types and ranges of the [run], [train], [runtime] and [comm]
// keys ([data] is read by read_data_config); every message names the key and the value.
#include "ringtrain/train/train_config.hpp"

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/runtime/slurm.hpp"

namespace ringtrain {
namespace {

void require_positive(const Config& c, std::string_view key, std::int64_t v, std::int64_t min) {
  RT_REQUIRE(v >= min, ConfigError, "config: {}: key '{}': must be >= {}, got {}", c.source(), c.path_of(key), min, v);
}

}  // namespace

TrainConfig read_train_config(Config& config, const std::string& config_stem) {
  TrainConfig t;
  Config run = config.section("run");
  // Under Slurm the default names the job, so runs of one config (and requeues) never mix.
  std::string default_dir = "runs/" + config_stem;
  if (const SlurmInfo slurm = slurm_info(); slurm.active()) default_dir.append("-").append(slurm.run_id());
  t.run_dir = run.get_string("dir", default_dir);
  RT_REQUIRE(!t.run_dir.empty(), ConfigError, "config: {}: key 'run.dir' is empty", config.source());

  Config train = config.section("train");
  t.epochs = train.get_int("epochs", t.epochs);
  require_positive(train, "epochs", t.epochs, 1);
  t.max_steps = train.get_int("max_steps", t.max_steps);
  require_positive(train, "max_steps", t.max_steps, 0);
  t.batch_size = train.get_int("batch_size", t.batch_size);
  require_positive(train, "batch_size", t.batch_size, 1);
  t.eval_batch_size = train.get_int("eval_batch_size", t.eval_batch_size);
  require_positive(train, "eval_batch_size", t.eval_batch_size, 1);
  const std::int64_t seed = train.get_int("seed", 0);
  require_positive(train, "seed", seed, 0);
  t.seed = static_cast<std::uint64_t>(seed);
  t.log_every = train.get_int("log_every", t.log_every);
  require_positive(train, "log_every", t.log_every, 1);
  t.accumulation_steps = train.get_int("accumulation_steps", t.accumulation_steps);
  require_positive(train, "accumulation_steps", t.accumulation_steps, 1);
  t.resume = train.get_string("resume", t.resume);
  RT_REQUIRE(!t.resume.empty(), ConfigError, "config: {}: key 'train.resume': must be \"auto\", \"none\" or a path",
             config.source());
  t.exit_at_step = train.get_int("exit_at_step", t.exit_at_step);
  t.cuda_graph = train.get_bool("cuda_graph", t.cuda_graph);
  require_positive(train, "exit_at_step", t.exit_at_step, 0);
  const std::string precision = train.get_string("precision", "fp32");
  if (precision == "bf16") {
    t.precision = DType::bf16;
  } else if (precision == "fp16") {
    t.precision = DType::f16;
  } else {
    RT_REQUIRE(precision == "fp32", ConfigError,
               "config: {}: key 'train.precision': '{}' is not one of \"fp32\", \"bf16\", \"fp16\"", config.source(),
               precision);
  }
  if (t.precision == DType::f16 || config.has("loss_scale")) {  // only then: other resolved configs get no [loss_scale]
    Config ls = config.section("loss_scale");
    t.loss_scale.init = ls.get_double("init", t.loss_scale.init);
    t.loss_scale.growth_interval = ls.get_int("growth_interval", t.loss_scale.growth_interval);
    t.loss_scale.growth_factor = ls.get_double("growth_factor", t.loss_scale.growth_factor);
    t.loss_scale.backoff_factor = ls.get_double("backoff_factor", t.loss_scale.backoff_factor);
    t.loss_scale.dynamic = ls.get_bool("dynamic", t.loss_scale.dynamic);
    try {
      GradScaler check(t.loss_scale);  // the scaler's own validation, with the key names
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("config: {}: {}", config.source(), e.what()));
    }
  }

  Config ckpt = config.section("checkpoint");
  t.checkpoint.enabled = ckpt.get_bool("enabled", t.checkpoint.enabled);
  t.checkpoint.dir = ckpt.get_string("dir", t.run_dir + "/checkpoints");
  RT_REQUIRE(!t.checkpoint.dir.empty(), ConfigError, "config: {}: key 'checkpoint.dir' is empty", config.source());
  t.checkpoint.every_steps = ckpt.get_int("every_steps", t.checkpoint.every_steps);
  require_positive(ckpt, "every_steps", t.checkpoint.every_steps, 0);
  t.checkpoint.every_seconds = ckpt.get_double("every_seconds", t.checkpoint.every_seconds);
  RT_REQUIRE(t.checkpoint.every_seconds >= 0.0, ConfigError,
             "config: {}: key 'checkpoint.every_seconds': must be >= 0, "
             "got {}",
             config.source(), t.checkpoint.every_seconds);
  t.checkpoint.keep = ckpt.get_int("keep", t.checkpoint.keep);
  require_positive(ckpt, "keep", t.checkpoint.keep, 1);

  Config data = config.section("data");
  t.data = read_data_config(data);

  Config runtime = config.section("runtime");
  t.backend = runtime.get_string("backend", t.backend);
  RT_REQUIRE(t.backend == "cpu" || t.backend == "cuda", ConfigError,
             "config: {}: key 'runtime.backend': '{}' is not one of \"cpu\", \"cuda\"", config.source(), t.backend);
  t.tf32 = runtime.get_bool("tf32", t.tf32);
  t.threads = runtime.get_int("threads", t.threads);
  require_positive(runtime, "threads", t.threads, 0);

  Config comm = config.section("comm");
  t.allreduce = comm.get_string("allreduce", t.allreduce);
  RT_REQUIRE(t.allreduce == "ring" || t.allreduce == "mpi" || t.allreduce == "nccl", ConfigError,
             "config: {}: key 'comm.allreduce': '{}' is not one of \"ring\", \"mpi\", \"nccl\"", config.source(),
             t.allreduce);
  t.wire_dtype = comm.get_string("wire_dtype", t.wire_dtype);
  t.overlap = comm.get_bool("overlap", t.overlap);
  t.bucket_mb = comm.get_double("bucket_mb", t.bucket_mb);
  t.first_bucket_mb = comm.get_double("first_bucket_mb", t.first_bucket_mb);
  t.timeout_s = comm.get_double("timeout_s", t.timeout_s);
  for (const auto& [key, value] : {std::pair{"bucket_mb", t.bucket_mb}, std::pair{"first_bucket_mb", t.first_bucket_mb},
                                   std::pair{"timeout_s", t.timeout_s}})
    RT_REQUIRE(value > 0.0, ConfigError, "config: {}: key 'comm.{}': must be > 0, got {}", config.source(), key, value);

  Config monitor = config.section("monitor");
  t.trace = monitor.get_bool("trace", t.trace);
  t.monitor_interval_ms = monitor.get_int("interval_ms", t.monitor_interval_ms);
  require_positive(monitor, "interval_ms", t.monitor_interval_ms, 0);
  return t;
}

std::string_view precision_name(DType precision) {
  switch (precision) {
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    default: return "fp32";
  }
}

LoaderOptions loader_options(const TrainConfig& tc, int world_size, int rank, bool training) {
  LoaderOptions o;
  o.training = training;
  o.batch_size = training ? tc.batch_size * tc.accumulation_steps : tc.eval_batch_size;
  o.world_size = world_size;
  o.rank = rank;
  o.seed = tc.seed;
  o.epochs = tc.epochs;
  o.prefetch = tc.data.prefetch;
  o.augment = tc.data.augment;
  o.normalize = tc.data.normalize;
  o.shuffle_window = tc.data.shuffle_window;
  o.read_ahead = tc.data.read_ahead;
  return o;
}

bool augment_on_gpu(const TrainConfig& tc, bool on_gpu, SampleType train_samples) {
  const bool u8 = train_samples == SampleType::u8;
  if (tc.data.augment_on == AugmentOn::gpu) {
    RT_REQUIRE(on_gpu, ConfigError,
               "data.augment_on: \"gpu\" needs a run on the cuda backend; this one runs on the CPU");
    RT_REQUIRE(u8, ConfigError, "data.augment_on: \"gpu\" needs uint8 samples; data.train holds {}",
               sample_type_name(train_samples));
  }
  return tc.data.augment_on != AugmentOn::cpu && on_gpu && u8;
}

}  // namespace ringtrain
