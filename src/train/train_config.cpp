// read_train_config: the [run], [train], [loss_scale], [checkpoint], [runtime], [comm] and
// [monitor] keys, each declared once below with its default, range and doc ([data] is read by
// read_data_config). Ranges and spellings are checked by Config::get, with one message format.
#include "ringtrain/train/train_config.hpp"

#include "ringtrain/core/config.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/runtime/slurm.hpp"

namespace ringtrain {
namespace {

const StringKey kRunDir(
    {.name = "run.dir",
     .doc = "where `config.toml` (resolved), `metrics.jsonl`, `summary.json` go",
     .default_doc = "`runs/<config name>` (under Slurm `runs/<config name>-<job id>[_<array task>]`)"},
    "");

// Upper bounds keep every product of config values in an int64: global batch = batch x
// accumulation x ranks <= 2^20 x 2^10 x 2^31 (an int world size).
constexpr double kMaxBatch = 1 << 20;
constexpr double kMaxAccumulation = 1 << 10;

const IntKey kEpochs(
    {.name = "train.epochs", .doc = "epochs over the training set", .range = Range::between(1, 1'000'000)}, 1);
const IntKey kMaxSteps({.name = "train.max_steps",
                        .doc = "stop after this many optimizer steps of the run, counted from its step 0 across "
                               "resumes (0: no limit)",
                        .range = Range::at_least(0)},
                       0);
const IntKey kBatchSize({.name = "train.batch_size",
                         .doc = "per-rank micro-batch; the global batch is `world x batch_size x accumulation_steps`",
                         .range = Range::between(1, kMaxBatch)},
                        64);
const IntKey kEvalBatchSize({.name = "train.eval_batch_size",
                             .doc = "per-rank batch for evaluation",
                             .range = Range::between(1, kMaxBatch),
                             .default_doc = "`256` (images), `train.batch_size` (tokens: a window's activations are "
                                            "block_size times an image's)"},
                            256);
const IntKey kEvalEvery({.name = "train.eval_every",
                         .doc = "also evaluate on `data.test` every this many steps (0: at the end of each epoch and "
                                "of the run only)",
                         .range = Range::at_least(0)},
                        0);
const IntKey kEvalBatches({.name = "train.eval_batches",
                           .doc = "batches of `eval_batch_size` per rank an evaluation reads from the start of its "
                                  "shard of `data.test` (0: all)",
                           .range = Range::at_least(0)},
                          0);
const IntKey kSeed({.name = "train.seed",
                    .doc = "seeds initialisation, the sampler's per-epoch permutation and dropout",
                    .range = Range::at_least(0)},
                   0);
const IntKey kLogEvery({.name = "train.log_every",
                        .doc = "steps between progress lines and `metrics.jsonl` records",
                        .range = Range::at_least(1)},
                       100);
const IntKey kAccumulationSteps({.name = "train.accumulation_steps",
                                 .doc = "micro-batches of `batch_size` per optimizer step (gradients allreduced once, "
                                        "on the last)",
                                 .range = Range::between(1, kMaxAccumulation)},
                                1);
const StringKey kResume({.name = "train.resume",
                         .doc = "`auto`: continue from the newest intact checkpoint in `checkpoint.dir` (damaged ones "
                                "are skipped with a warning; none there: start fresh); `none`; or a checkpoint file. "
                                "Any rank count works if the global batch stays the same (docs/CHECKPOINT.md)"},
                        "none");
const IntKey kExitAtStep({.name = "train.exit_at_step",
                          .doc = "end the run after this optimizer step of the run (counted from step 0 across "
                                 "resumes) with a checkpoint and exit status 75, like a preemption (0: never)",
                          .range = Range::at_least(0)},
                         0);
const IntKey kZeroStage({.name = "train.zero_stage",
                         .doc = "ZeRO sharding over the data-parallel ranks: `0` every rank keeps the whole training "
                                "state; `1` each keeps the optimizer state of its shard of every gradient bucket "
                                "(gradients reduce-scattered, parameters allgathered after the update); `2` also only "
                                "its shard of the reduced gradients (each bucket staged during backward); `3` also "
                                "only its shard of the parameters (each bucket's layers gathered just before forward "
                                "and backward use them, then released; the bucket size, `comm.bucket_mb`, is the "
                                "gather unit). On the cpu backend every stage trains bitwise like stage 0; on "
                                "`cuda` every stage runs (NCCL reduce-scatter and allgather, which agree with its "
                                "allreduce to rounding)",
                         .range = Range::between(0, 3)},
                        0);
const BoolKey kCudaGraph({.name = "train.cuda_graph",
                          .doc = "`cuda`: replay each step's forward, loss and backward as one CUDA graph (from the "
                                 "second step; the gradient allreduce then follows backward instead of overlapping "
                                 "it). Refused with a warning for `accumulation_steps > 1`"},
                         false);
const EnumKey<DType> kPrecision({.name = "train.precision",
                                 .doc = "f32 master weights, optimizer and allreduce; activations, GEMM inputs and "
                                        "gradients in the low precision (emulated by rounding on the CPU backend; "
                                        "docs/MIXED_PRECISION.md)"},
                                DType::f32, {{"fp32", DType::f32}, {"bf16", DType::bf16}, {"fp16", DType::f16}});

// fp16 only (read whenever [loss_scale] is present, so a mistyped key is still caught).
const NumberKey kLossScaleInit({.name = "loss_scale.init",
                                .doc = "`fp16`: the initial loss scale",
                                .range = Range::at_least(GradScaler::kMinScale)},
                               LossScaleOptions{}.init);
const IntKey kLossScaleGrowthInterval({.name = "loss_scale.growth_interval",
                                       .doc = "`fp16`: clean steps after which the scale grows by `growth_factor`",
                                       .range = Range::at_least(1)},
                                      LossScaleOptions{}.growth_interval);
const NumberKey kLossScaleGrowthFactor({.name = "loss_scale.growth_factor",
                                        .doc = "`fp16`: growth of the scale",
                                        .range = Range::above(1)},
                                       LossScaleOptions{}.growth_factor);
const NumberKey kLossScaleBackoffFactor({.name = "loss_scale.backoff_factor",
                                         .doc = "`fp16`: the scale's factor on a step with Inf/NaN gradients, which "
                                                "is skipped and logged",
                                         .range = {0.0, 1.0, true, true}},
                                        LossScaleOptions{}.backoff_factor);
const BoolKey kLossScaleDynamic({.name = "loss_scale.dynamic",
                                 .doc = "`fp16`: `false` keeps the scale at `init` (overflowing steps still skipped)"},
                                LossScaleOptions{}.dynamic);

const BoolKey kCheckpointEnabled({.name = "checkpoint.enabled",
                                  .doc = "write checkpoints (at the end, on SIGTERM/SIGUSR1, and as below)"},
                                 true);
const StringKey kCheckpointDir({.name = "checkpoint.dir",
                                .doc = "where `ckpt-<step>.h5` files and the `latest` pointer go; checked writable at "
                                       "start",
                                .default_doc = "`<run.dir>/checkpoints`"},
                               "");
const IntKey kCheckpointEverySteps(
    {.name = "checkpoint.every_steps", .doc = "also save every N steps (0: off)", .range = Range::at_least(0)}, 0);
const NumberKey kCheckpointEverySeconds({.name = "checkpoint.every_seconds",
                                         .doc = "also save every N seconds of wall time (0: off)",
                                         .range = Range::at_least(0)},
                                        0.0);
const IntKey kCheckpointKeep(
    {.name = "checkpoint.keep", .doc = "newest checkpoint files kept", .range = Range::at_least(1)}, 3);
const BoolKey kCheckpointOverwrite(
    {.name = "checkpoint.overwrite",
     .doc = "let a fresh start (or a resume from an older checkpoint file) delete the checkpoints of another run "
            "(or later steps) in `checkpoint.dir`; without it such a run refuses to start"},
    false);

const NumberKey kCheckpointTimeoutS(
    {.name = "checkpoint.timeout_s",
     .doc = "a checkpoint save or resume that takes longer ends the job as a hang (0: `comm.timeout_s` plus one "
            "second per 20 MB it writes or reads, so a large save on a slow file system is not taken for one)",
     .range = Range::at_least(0)},
    0.0);

const EnumKey<Device> kBackend({.name = "runtime.backend",
                                .doc = "compute backend: one GPU per rank for `cuda` (local rank mod visible "
                                       "GPUs; without a usable GPU it warns and runs on the CPU)"},
                               Device::cpu, {{"cpu", Device::cpu}, {"cuda", Device::cuda}});
const BoolKey kTf32({.name = "runtime.tf32", .doc = "`cuda`, fp32: let GEMMs and convolutions use TF32 tensor cores"},
                    false);
const IntKey kThreads({.name = "runtime.threads",
                       .doc = "compute threads per rank, for the GEMMs and the CPU layers' own loops (0: the "
                              "node's cores split among its ranks, at most the CPUs a rank is bound to; a count "
                              "its CPUs cannot run at once is warned about). Results are the same bits run to run "
                              "at a given count, not across counts: oneDNN's GEMMs and convolutions split their "
                              "sums by it",
                       .range = Range::at_least(0)},
                      0);

const EnumKey<GradientAllreduce> kAllreduce(
    {.name = "comm.allreduce",
     .doc = "gradients: `ring` (our reduce-scatter + allgather) or `mpi` (`MPI_Allreduce`), through host memory; "
            "`nccl` (every rank on a GPU; overlapped with backward; otherwise the ring is used, with a warning); "
            "`auto`: `nccl` where every rank of a job of several computes on a GPU and the build has NCCL, else "
            "`ring`"},
    GradientAllreduce::automatic,
    {{"auto", GradientAllreduce::automatic},
     {"ring", GradientAllreduce::ring},
     {"mpi", GradientAllreduce::mpi},
     {"nccl", GradientAllreduce::nccl}});
const EnumKey<DType> kWireDtype({.name = "comm.wire_dtype",
                                 .doc = "`bf16` sends f32 gradients as bf16 (half the bytes; sums formed in f32; ring "
                                        "only); pays only on links slower than ~5 GB/s"},
                                DType::f32, {{"f32", DType::f32}, {"bf16", DType::bf16}});
const BoolKey kOverlap({.name = "comm.overlap",
                        .doc = "allreduce gradient buckets during backward on a communication thread; `false`: the "
                               "same buckets after backward"},
                       true);
const NumberKey kBucketMb({.name = "comm.bucket_mb",
                           .doc = "bucket target; buckets are cut at layer boundaries from the end of the gradient "
                                  "arena; unset, 25 where the buckets go to NCCL",
                           .range = Range::above(0)},
                          1.0);
const NumberKey kFirstBucketMb(
    {.name = "comm.first_bucket_mb", .doc = "target of the first (last-layer) bucket", .range = Range::above(0)}, 0.25);
const NumberKey kTimeoutS({.name = "comm.timeout_s",
                           .doc = "watchdog: a collective that takes longer ends the job with a message naming it "
                                  "(operation, sequence number, size)",
                           .range = Range::above(0)},
                          300.0);

const BoolKey kTrace({.name = "monitor.trace",
                      .doc = "write a Chrome/Perfetto timeline of every rank to `run.dir/trace.json` (open in "
                             "ui.perfetto.dev or chrome://tracing)"},
                     false);
const BoolKey kPhaseTiming(
    {.name = "monitor.phase_timing",
     .doc = "GPU: wait for the device at the end of forward, of backward and of the optimizer, and decide the step "
            "on the host, so that the step's phase times are the device's (profiling: the host then no longer "
            "queues ahead); off, the step is decided on the device and the host waits once, after the optimizer is "
            "queued: the step's total is the device's, its parts are not timed apart. No effect on the CPU"},
    false);
const IntKey kMonitorIntervalMs(
    {.name = "monitor.interval_ms",
     .doc = "every rank samples its CPU utilization and resident memory (and its GPU's through NVML where "
            "`libnvidia-ml.so.1` loads) this often; rank 0's samples go to `metrics.jsonl`, the end prints one line "
            "per rank and warns about a rank > 25% slower than the median rank (0: off)",
     .range = Range::at_least(0)},
    1000);
const NumberKey kPeakGflops({.name = "monitor.peak_gflops",
                             .doc = "one rank's peak GFLOP/s, against which the model FLOP utilization (MFU) is "
                                    "reported; 0: measured at the start on the CPU (a 1024^3 sgemm on every rank at "
                                    "once, about 0.2 s; `ringtrain bench gemm` measures the same; on a node shared "
                                    "with other jobs it can read low, and MFU above 100% is warned), not reported on "
                                    "the GPU",
                             .range = Range::at_least(0)},
                            0.0);

}  // namespace

TrainConfig read_train_config(Config& config, const std::string& config_stem) {
  TrainConfig t;
  // Under Slurm the default names the job, so runs of one config (and requeues) never mix.
  std::string default_dir = "runs/" + config_stem;
  if (const SlurmInfo slurm = slurm_info(); slurm.active()) default_dir.append("-").append(slurm.run_id());
  t.run_dir = config.get(kRunDir, default_dir);
  RT_REQUIRE(!t.run_dir.empty(), ConfigError, "config: {}: key 'run.dir' is empty", config.source());

  t.epochs = config.get(kEpochs);
  t.max_steps = config.get(kMaxSteps);
  t.batch_size = config.get(kBatchSize);
  t.eval_every = config.get(kEvalEvery);
  t.eval_batches = config.get(kEvalBatches);
  t.seed = static_cast<std::uint64_t>(config.get(kSeed));
  t.log_every = config.get(kLogEvery);
  t.accumulation_steps = config.get(kAccumulationSteps);
  t.resume = config.get(kResume);
  RT_REQUIRE(!t.resume.empty(), ConfigError, "config: {}: key 'train.resume': must be \"auto\", \"none\" or a path",
             config.source());
  t.exit_at_step = config.get(kExitAtStep);
  t.cuda_graph = config.get(kCudaGraph);
  t.zero_stage = static_cast<int>(config.get(kZeroStage));
  t.precision = config.get(kPrecision);
  if (t.precision == DType::f16 || config.has("loss_scale")) {  // only then: other resolved configs get no [loss_scale]
    t.loss_scale.init = config.get(kLossScaleInit);
    t.loss_scale.growth_interval = config.get(kLossScaleGrowthInterval);
    t.loss_scale.growth_factor = config.get(kLossScaleGrowthFactor);
    t.loss_scale.backoff_factor = config.get(kLossScaleBackoffFactor);
    t.loss_scale.dynamic = config.get(kLossScaleDynamic);
  }

  t.checkpoint.enabled = config.get(kCheckpointEnabled);
  t.checkpoint.dir = config.get(kCheckpointDir, t.run_dir + "/checkpoints");
  RT_REQUIRE(!t.checkpoint.dir.empty(), ConfigError, "config: {}: key 'checkpoint.dir' is empty", config.source());
  t.checkpoint.every_steps = config.get(kCheckpointEverySteps);
  t.checkpoint.every_seconds = config.get(kCheckpointEverySeconds);
  t.checkpoint.keep = config.get(kCheckpointKeep);
  t.checkpoint.overwrite = config.get(kCheckpointOverwrite);
  t.checkpoint.timeout_s = config.get(kCheckpointTimeoutS);
  RT_REQUIRE(t.exit_at_step == 0 || t.checkpoint.enabled, ConfigError,
             "config: {}: train.exit_at_step = {} stops the run with exit 75 to be continued, but checkpoint.enabled "
             "= false leaves nothing to continue from",
             config.source(), t.exit_at_step);

  Config data = config.section("data");
  Config model = config.section("model");
  t.data = read_data_config(data, model_block_size(model));
  t.eval_batch_size = config.get(kEvalBatchSize, t.data.format == DataFormat::tokens ? t.batch_size : 256);

  t.backend = config.get(kBackend);
  t.tf32 = config.get(kTf32);
  t.threads = config.get(kThreads);

  t.allreduce = config.get(kAllreduce);
  t.wire_dtype = config.get(kWireDtype);
  t.overlap = config.get(kOverlap);
  t.bucket_mb_given = config.has(kBucketMb);  // before get, which records the default in the resolved config
  t.bucket_mb = config.get(kBucketMb);
  t.first_bucket_mb = config.get(kFirstBucketMb);
  t.timeout_s = config.get(kTimeoutS);

  t.trace = config.get(kTrace);
  t.phase_timing = config.get(kPhaseTiming);
  t.monitor_interval_ms = config.get(kMonitorIntervalMs);
  t.peak_gflops = config.get(kPeakGflops);
  return t;
}

std::string_view precision_name(DType precision) { return kPrecision.spelling(precision); }

std::string_view allreduce_name(GradientAllreduce allreduce) { return kAllreduce.spelling(allreduce); }

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

TokenLoaderOptions token_loader_options(const TrainConfig& tc, int world_size, int rank, bool training) {
  const LoaderOptions image = loader_options(tc, world_size, rank, training);
  TokenLoaderOptions o;
  o.training = training;
  o.batch_size = image.batch_size;
  o.world_size = world_size;
  o.rank = rank;
  o.seed = image.seed;
  o.epochs = image.epochs;
  o.prefetch = image.prefetch;
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
