// run_training: set-up in collective phases (config, data, model+optimizer, run dir and
// checkpoints, resume) so that bad input on any rank ends every rank with the same one-line
// error; then the data-parallel loop: batch -> forward/backward -> allreduce(grads) ->
// optimizer step, with checkpoints and stop requests handled between steps.
#include "ringtrain/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <functional>
#include <new>
#include <optional>
#include <nlohmann/json.hpp>

#include "ringtrain/ckpt/dir_lock.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/watchdog.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/data/dataset.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/monitor/metrics_log.hpp"
#include "ringtrain/monitor/tracer.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/grad_scaler.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/prune/pruner.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"
#include "ringtrain/train/data_parallel_step.hpp"
#include "ringtrain/train/peak_flops.hpp"
#include "ringtrain/train/run_comms.hpp"
#include "ringtrain/train/session.hpp"
#include "ringtrain/train/train_config.hpp"
#include "ringtrain/train/batch_source.hpp"
#include "train/checkpointing.hpp"
#include "train/device_batch.hpp"
#include "train/run_report.hpp"
#include "train/step_loss.hpp"
#include "train/stop_signals.hpp"
#include "train/zero_parameters.hpp"

namespace ringtrain {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Runs work; a host allocation that fails in it (a step's or an evaluation's first activations)
// is reported with what was being done: doing() names the key that sizes it.
template <class Work, class Doing>
auto noting_what_ran_out_of_memory(Work&& work, Doing&& doing) {
  try {
    return work();
  } catch (const HostOutOfMemory&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw HostOutOfMemory(doing());
  }
}

// The session (config, comms, data, model, optimizer) plus what only training needs: the
// loaders, the checkpoints and the position a resumed run starts from.
struct Setup {
  std::unique_ptr<Session> session;
  std::unique_ptr<BatchSource> train_loader;
  // A fresh pass over this rank's shard of data.test per evaluation; empty without data.test.
  std::function<std::unique_ptr<BatchSource>()> test_source;
  std::unique_ptr<DirLock> run_dir_lock;  // rank 0: one run at a time writes run.dir's records
  std::unique_ptr<TrainCheckpoints> checkpoints;
  std::optional<TrainPosition> resumed;  // set when continuing from a checkpoint
};

std::unique_ptr<Setup> set_up(Context& ctx, const std::string& config_path, const ConfigOverrides& overrides) {
  auto setup = std::make_unique<Setup>();
  setup->session = open_session(ctx, config_path, overrides);
  Session& s = *setup->session;
  const TrainConfig& tc = s.tc;
  if (s.test || s.test_tokens)
    setup->test_source = [&s, &ctx] {
      return for_data_key("data.test", [&] {
        if (s.test_tokens) {
          TokenLoaderOptions o = token_loader_options(s.tc, ctx.world_size(), ctx.world_rank(), false);
          o.epochs = 1;
          return make_batch_source(s.test_tokens, o);
        }
        LoaderOptions o = loader_options(s.tc, ctx.world_size(), ctx.world_rank(), false);
        o.epochs = 1;
        return make_batch_source(s.test, o);
      });
    };
  run_collectively(ctx, [&] {
    if (setup->test_source) setup->test_source();  // bad options fail here, on every rank alike
    if (ctx.world_rank() != 0) return;
    std::error_code ec;
    std::filesystem::create_directories(tc.run_dir, ec);
    RT_REQUIRE(!ec, IoError, "run.dir: {}: cannot create: {}", tc.run_dir, ec.message());
    // metrics.jsonl, config.toml and summary.json of two runs would mix (also without
    // checkpoints, whose directory has its own lock; another file, should they be one directory).
    setup->run_dir_lock = std::make_unique<DirLock>(tc.run_dir, "run.dir", ".run.lock");
  });
  const std::int64_t global_batch = tc.batch_size * tc.accumulation_steps * ctx.world_size();
  setup->checkpoints = std::make_unique<TrainCheckpoints>(ctx, tc, *s.model, *s.optimizer, s.scaler, s.resolved_config,
                                                          global_batch, *s.comms.watchdog);
  if (s.pruner) setup->checkpoints->add_replicated("prune/mask", s.pruner->mask());
  setup->resumed = setup->checkpoints->resume(s.steps_per_epoch);
  // Only now, when the checkpoint directory is this run's, does the resolved config replace
  // whatever an earlier run left in run.dir; not when that run is complete (nothing trains).
  const bool complete = setup->resumed && setup->resumed->step >= s.total_steps;
  run_collectively(ctx, [&] {
    if (ctx.world_rank() == 0 && !complete) write_file_atomic(tc.run_dir + "/config.toml", s.resolved_config + "\n");
  });
  if (s.pruner && setup->resumed) s.pruner->mask_written();  // the restored host mask, to the GPU's copy
  run_collectively(ctx, [&] {
    const TrainPosition from = setup->resumed.value_or(TrainPosition{});
    if (from.epoch >= tc.epochs) return;
    setup->train_loader = for_data_key("data.train", [&] {
      if (s.tokens()) {
        TokenLoaderOptions o = token_loader_options(tc, ctx.world_size(), ctx.world_rank(), true);
        o.start_epoch = from.epoch;
        o.start_step = from.step_in_epoch;
        return make_batch_source(s.train_tokens, o);
      }
      LoaderOptions o = loader_options(tc, ctx.world_size(), ctx.world_rank(), true);
      o.raw = s.gpu_augment;
      o.start_epoch = from.epoch;
      o.start_step = from.step_in_epoch;
      return make_batch_source(s.train, o);
    });
  });
  return setup;
}

// Loss and accuracy over the test set (per label: per token for token data).
struct EvalResult {
  double accuracy = 0.0;
  double loss = 0.0;
};

// Evaluation runs the model where it lives: on the GPU the batch is uploaded and the loss
// computed there, through the same pieces as a training step.
class Evaluator {
 public:
  Evaluator(const Model& model, std::int64_t max_rows)
      : positions_(label_positions(model)),
        dlogits_(Tensor::empty(model.output_shape().with_batch(max_rows), model.activation_dtype(), model.device())),
        loss_(make_step_loss(model.device(), max_rows * positions_, 1)),
        placer_(make_device_batch(model.device(), max_rows, model.input_shape(), model.input_dtype(), positions_)) {}
  std::int64_t positions() const { return positions_; }
  LossSums run(Model& model, const SourceBatch& batch) {
    const StepInfo info{false, 0, 0, 0};
    const PlacedBatch placed = placer_->upload(batch.images != nullptr ? batch.images->x : batch.x, batch.labels);
    const Tensor& logits = model.forward(placed.x, info);
    const Shape rows{batch.size * positions_, logits.shape().dims().back()};
    Tensor dlogits = dlogits_.rows(0, batch.size).reshape(rows);
    loss_->compute(logits.reshape(rows), placed.labels, dlogits, 1.0f, 0);
    return loss_->sums(1);
  }

 private:
  std::int64_t positions_;
  Tensor dlogits_;
  std::unique_ptr<StepLoss> loss_;
  std::unique_ptr<DeviceBatch> placer_;
};

// One pass over the test set (train.eval_batches batches per rank when set).
EvalResult evaluate(Session& s, BatchSource& test_loader, const Context& ctx, Evaluator& evaluator) {
  // BatchNorm statistics are per rank: average them so every rank evaluates the same model.
  for (Tensor& b : s.model->buffers())
    with_host_copy(b, [&](Tensor& h) {
      s.comms.main->allreduce_sum(h.raw(), static_cast<std::size_t>(h.numel()), DType::f32);
      for (std::int64_t i = 0; i < h.numel(); ++i) h.f32()[i] /= static_cast<float>(ctx.world_size());
    });
  double sums[3] = {0.0, 0.0, 0.0};  // correct, loss sum, labels
  std::int64_t batches = test_loader.steps_per_epoch();
  if (s.tc.eval_batches > 0) batches = std::min(batches, s.tc.eval_batches);
  for (std::int64_t i = 0; i < batches; ++i) {
    const SourceBatch batch = for_data_key("data.test", [&] { return test_loader.next(); });
    const LossSums r = noting_what_ran_out_of_memory(
        [&] { return evaluator.run(*s.model, batch); },
        [&] {
          return fmt::format("in an evaluation's forward pass of {} samples (train.eval_batch_size; lower it)",
                             batch.size);
        });
    sums[0] += r.correct;
    sums[1] += r.loss;
    sums[2] += static_cast<double>(batch.size * evaluator.positions());
  }
  s.comms.main->allreduce_sum(sums, 3, DType::f64);
  return EvalResult{sums[0] / sums[2], sums[1] / sums[2]};
}

// One training step on a batch from the source: an image batch goes whole (a raw one is
// augmented on the GPU), token windows as inputs and targets.
StepResult run_step(DataParallelStep& step, const SourceBatch& batch, const StepInfo& info, float lr) {
  if (batch.images != nullptr) return step.run(*batch.images, info, lr);
  return step.run(batch.x, batch.labels, info, lr);
}

// The same batch staged ahead of its step (DataParallelStep::stage_next).
void stage_next(DataParallelStep& step, const SourceBatch& batch) {
  if (batch.images != nullptr) return step.stage_next(*batch.images);
  step.stage_next(batch.x, batch.labels);
}

// Every rank must hold bitwise identical parameters at the end; a difference is a bug in
// the data-parallel machinery and fails the run on all ranks. Sharded parameters (ZeRO stage 3)
// are hashed group by group as they are gathered: the same value as the whole arena's.
std::string verify_param_checksums(Session& s, const Context& ctx, ZeroParameters* shards) {
  std::uint64_t mine = kFnv1aStart;
  if (shards != nullptr) {
    shards->for_each_gathered([&](const float* data, std::int64_t count) {
      mine = fnv1a(data, static_cast<std::size_t>(count) * sizeof(float), mine);
    });
  } else {
    const Tensor p = to_host(s.model->params());
    mine = fnv1a(p.raw(), p.nbytes(), mine);
  }
  std::uint64_t root = mine;
  s.comms.main->broadcast(&root, sizeof(root), 0);
  std::int32_t differs = mine != root ? 1 : 0;
  s.comms.main->allreduce_sum(&differs, 1, DType::i32);
  if (differs != 0)
    throw CollectiveError(
        fmt::format("parameter checksums differ across ranks at the end of training: {} of {} "
                    "ranks differ from rank 0 ({:016x})",
                    differs, ctx.world_size(), root));
  return fmt::format("{:016x}", root);
}

// Each rank writes its own trace; rank 0 merges them into run.dir/trace.json (the run dir
// is on a file system every rank sees, as metrics and checkpoints assume too).
void write_trace(const Tracer& tracer, const Session& s, const Context& ctx) {
  const std::string dir = s.tc.run_dir;
  run_collectively(ctx, [&] { tracer.write(fmt::format("{}/trace-rank{}.json", dir, ctx.world_rank())); });
  run_collectively(ctx, [&] {
    if (ctx.world_rank() != 0) return;
    std::vector<std::string> parts;
    parts.reserve(static_cast<std::size_t>(ctx.world_size()));
    for (int r = 0; r < ctx.world_size(); ++r) parts.push_back(fmt::format("{}/trace-rank{}.json", dir, r));
    Tracer::merge(parts, dir + "/trace.json");
    for (const auto& p : parts) std::filesystem::remove(p);
  });
  log::info("trace:  {}/trace.json (open in ui.perfetto.dev or chrome://tracing)", dir);
}

// Between two steps: whether to checkpoint and whether to stop. Stop signals and the
// checkpoint clock are summed over the ranks, so all of them decide alike after the same step.
struct Boundary {
  bool save = false;
  bool stop = false;
  std::string why;  // for the log
};

class BoundaryPolicy {
 public:
  BoundaryPolicy(const TrainConfig& tc, Communicator& comm, const Context& ctx)
      : tc_(tc), comm_(comm), rank0_(ctx.world_rank() == 0), world_(ctx.world_size()), last_save_(Clock::now()) {}

  Boundary after_step(std::int64_t step, std::int64_t total_steps) {
    const int signal = StopSignals::received();
    std::int32_t flags[3] = {
        signal == SIGTERM ? 1 : 0, signal == SIGUSR1 ? 1 : 0,
        rank0_ && tc_.checkpoint.every_seconds > 0.0 && seconds_since(last_save_) >= tc_.checkpoint.every_seconds ? 1
                                                                                                                  : 0};
    comm_.allreduce_sum(flags, 3, DType::i32);
    Boundary b;
    if (flags[0] > 0 || flags[1] > 0) {
      const int which = flags[0] > 0 ? SIGTERM : SIGUSR1;
      b = {true, true,
           fmt::format("{} received by {} of {}", StopSignals::name(which), flags[0] > 0 ? flags[0] : flags[1],
                       count_of(world_, "rank"))};
    } else if (tc_.exit_at_step > 0 && step == tc_.exit_at_step && step < total_steps) {
      b = {true, true, fmt::format("train.exit_at_step = {} reached", tc_.exit_at_step)};
    } else if (step == total_steps) {
      b = {true, false, "end of training"};
    } else if (tc_.checkpoint.every_steps > 0 && step % tc_.checkpoint.every_steps == 0) {
      b = {true, false, "every_steps"};
    } else if (flags[2] > 0) {
      b = {true, false, "every_seconds"};
    }
    if (b.save) last_save_ = Clock::now();
    return b;
  }

 private:
  const TrainConfig& tc_;
  Communicator& comm_;
  bool rank0_;
  int world_;
  Clock::time_point last_save_;
};

}  // namespace

int run_training(Context& ctx, const std::string& config_path, const ConfigOverrides& overrides) {
  const auto setup_start = Clock::now();
  const StopSignals stop_signals;  // from the start: a signal during set-up stops after the first step
  const std::unique_ptr<Setup> setup = set_up(ctx, config_path, overrides);
  Session& s = *setup->session;
  const TrainConfig& tc = s.tc;
  Model& model = *s.model;
  const int world = ctx.world_size();
  const std::int64_t spe = s.steps_per_epoch;
  const std::int64_t b = tc.batch_size * tc.accumulation_steps;  // per rank and step
  const TrainPosition start = setup->resumed.value_or(TrainPosition{});
  if (start.step >= s.total_steps) {
    const bool by_max_steps = tc.max_steps > 0 && tc.max_steps <= spe * tc.epochs;
    log::info(
        "resume: the checkpoint is at step {} and this run ends at step {} ({}): this run is already complete; raise "
        "{} to train on",
        start.step, s.total_steps,
        by_max_steps ? fmt::format("train.max_steps = {}", tc.max_steps)
                     : fmt::format("train.epochs = {} of {} steps", tc.epochs, spe),
        by_max_steps ? "train.max_steps" : "train.epochs");
    return 0;
  }
  if (tc.exit_at_step > 0 && tc.exit_at_step <= start.step && ctx.world_rank() == 0)
    log::warn(
        "train.exit_at_step = {} is at or before the checkpoint's step {}: it does not stop this run, which "
        "goes on to step {}",
        tc.exit_at_step, start.step, s.total_steps);
  // Pruning may start from a checkpoint of a dense run (no mask in it): every weight is kept
  // until the schedule's next mask update, which must come after the checkpoint's step.
  if (s.pruner && setup->resumed && !setup->checkpoints->restored("prune/mask")) {
    const PruneConfig& pc = s.pruner->config();
    run_collectively(ctx, [&] {
      RT_REQUIRE(pc.end_step > start.step, ConfigError,
                 "prune: the checkpoint at step {} was written without pruning and prune.end_step = {} is not after "
                 "it, so nothing would be pruned; set prune.start_step and prune.end_step to steps after {}",
                 start.step, pc.end_step, start.step);
    });
    log::info(
        "prune: the checkpoint at step {} was written without pruning: all weights are kept until the next "
        "mask update of the schedule (start_step {}, end_step {}, every {} steps)",
        start.step, pc.start_step, pc.end_step, pc.every_steps);
  }
  // The rest of the set-up allocates (the metrics file, the step's buffers, the evaluation
  // batch): each piece agreed, so a rank that runs out of memory fails every rank alike.
  const std::unique_ptr<RunReport> report_made =
      make_collectively<RunReport>(ctx, ctx, s.tc, s.comms.main->name(), start.step);
  RunReport& report = *report_made;
  report.header(s, b * world);

  // Parameters start identical everywhere: rank 0's initialisation (random, or model.init_from)
  // is broadcast (a resumed run's parameters were read from the same checkpoint by every rank).
  if (!setup->resumed) {
    if (s.init_from.empty()) {
      start_from_root_params(model, *s.comms.main, tc.seed);
    } else {
      Config model_config = s.config->section("model");
      start_from_file(ctx, model_config, model, *s.comms.main, s.init_from);
    }
  }

  Tracer tracer(tc.trace, ctx.world_rank());
  StepOptions options = session_step_options(s, ctx);
  if (s.gpu_augment) options.gpu_augment = GpuAugment{tc.data.normalize, tc.data.augment.crop_padding};
  if (const AugmentOptions& a = tc.data.augment; a.enabled())
    log::info("augment: {}{}{} of training batches on the {}",
              a.crop_padding > 0 ? fmt::format("random crop (padding {})", a.crop_padding) : "",
              a.crop_padding > 0 && a.flip ? " and " : "", a.flip ? "left-right flip" : "",
              s.gpu_augment ? "GPU (uint8 batches uploaded)" : "CPU (loader threads)");
  else if (s.gpu_augment)
    log::info("input:  uint8 training batches uploaded and normalized on the GPU");
  if (tc.overlap && !options.overlap)
    log::warn("comm.overlap: MPI does not provide MPI_THREAD_MULTIPLE; gradients are reduced after backward");
  const std::unique_ptr<DataParallelStep> dp_step_made = make_collectively<DataParallelStep>(
      ctx, model, *s.optimizer, *s.comms.main, *s.comms.gradient, tc.batch_size, options, &tracer, &s.scaler);
  DataParallelStep& dp_step = *dp_step_made;
  report.comm_plan(dp_step.num_buckets(), dp_step.overlapped());
  if (tc.peak_gflops > 0) {
    report.peak(tc.peak_gflops, "monitor.peak_gflops");
  } else if (model.device() == Device::cpu) {
    // The best of three short runs: a core busy with something else only ever lowers a run's rate.
    constexpr std::int64_t kPeakSize = 1024;
    constexpr double kPeakSeconds = 0.1;
    constexpr int kPeakRuns = 3;
    const SgemmPeak p = measure_sgemm_peak(*s.comms.main, world, kPeakSize, kPeakSeconds, kPeakRuns);
    report.peak(*std::max_element(p.aggregate.begin(), p.aggregate.end()) / world,
                fmt::format("a 1024^3 sgemm on every rank at once, {}, best of {} runs now", p.library, kPeakRuns));
  }
  if (tc.cuda_graph) report.cuda_graph(dp_step.graphed(), dp_step.graph_refused());

  BoundaryPolicy policy(tc, *s.comms.main, ctx);
  std::unique_ptr<Evaluator> evaluator_made;
  run_collectively(ctx, [&] {
    try {
      evaluator_made = std::make_unique<Evaluator>(model, tc.eval_batch_size);
    } catch (const std::bad_alloc&) {  // with the key that sizes them
      throw HostOutOfMemory(fmt::format(
          "for the evaluation's buffers: train.eval_batch_size = {} samples of {} outputs each (lower it if that is "
          "large)",
          tc.eval_batch_size, model.output_shape().numel()));
    }
  });
  Evaluator& evaluator = *evaluator_made;
  report.setup_done(seconds_since(setup_start));
  const std::int64_t labels_per_step = b * world * label_positions(model);
  TrainPosition at = start;
  double final_loss = 0.0;
  std::optional<EvalResult> last_eval;  // none without a test set, or before the first evaluation
  std::string stopped;                  // why the run ended before its last step; empty when it completed
  // On the GPU the next step's batch is taken from the loader and staged while a step runs on
  // the device (DataParallelStep::set_upcoming), so its copy overlaps the step.
  std::optional<SourceBatch> upcoming;
  auto next_batch = [&] {
    // Prepared ahead unless data.prefetch = 0; a loader thread's error is rethrown here.
    return for_data_key("data.train", [&] { return setup->train_loader->next(); });
  };
  while (at.step < s.total_steps) {
    const auto t0 = Clock::now();
    const SourceBatch batch = upcoming ? *upcoming : next_batch();
    upcoming.reset();
    const auto t1 = Clock::now();
    tracer.span("data wait", "data", t0, t1);
    if (model.device() == Device::cuda && at.step + 1 < s.total_steps)
      dp_step.set_upcoming([&] {
        const auto begin = Clock::now();
        upcoming = next_batch();
        stage_next(dp_step, *upcoming);
        tracer.span("data wait (next step's batch, staged)", "data", begin, Clock::now());
      });
    else
      dp_step.set_upcoming(nullptr);
    const double lr = s.schedule->at(at.step);
    const StepResult r = noting_what_ran_out_of_memory(
        [&] {
          return run_step(dp_step, batch, StepInfo{true, tc.seed, at.step, ctx.world_rank()}, static_cast<float>(lr));
        },
        [&] {
          return fmt::format("in training step {} (train.batch_size = {} samples per rank and micro-batch; lower it)",
                             at.step, tc.batch_size);
        });
    if (r.skipped) report.overflow(at.step, r.scale_before, r.scale_after);
    if (s.pruner) s.pruner->after_step(at.step + 1);  // masks are re-applied after every optimizer step
    final_loss = r.loss;
    report.step(at.epoch, at.step_in_epoch, at.step, r.loss, r.correct / static_cast<double>(labels_per_step), lr,
                StepTimes{std::chrono::duration<double>(t1 - t0).count(), r.compute_s, r.exposed_s, r.allreduce_s},
                s.total_steps);
    ++at.step;
    // An epoch ends with its evaluation, also the last, partial one (max_steps), and with
    // train.eval_every every so many steps; evaluation averages BatchNorm statistics, so it
    // comes before any checkpoint of this step.
    const bool epoch_end = ++at.step_in_epoch == spe || at.step == s.total_steps;
    const bool periodic = tc.eval_every > 0 && at.step % tc.eval_every == 0;
    if (setup->test_source && (epoch_end || periodic)) {
      last_eval = evaluate(s, *setup->test_source(), ctx, evaluator);
      if (epoch_end) {
        report.epoch_end(at.epoch, tc.epochs, at.step, last_eval->accuracy, last_eval->loss);
      } else {
        report.evaluation(at.step, last_eval->accuracy, last_eval->loss);
      }
    }
    if (at.step_in_epoch == spe) {
      ++at.epoch;
      at.step_in_epoch = 0;
    }
    const Boundary boundary = policy.after_step(at.step, s.total_steps);
    if (boundary.save && setup->checkpoints->enabled()) setup->checkpoints->save(at, boundary.why);
    if (boundary.stop) {
      stopped = boundary.why;
      break;
    }
  }
  // A stopped run reports too (summary.json with "finished": false), then says how to continue.
  const std::string checksum = verify_param_checksums(s, ctx, dp_step.parameter_shards());
  report.resources(*s.comms.main);
  if (tracer.enabled()) write_trace(tracer, s, ctx);
  if (s.pruner) report.sparsity(s.pruner->report(), s.pruner->config());
  report.graph_replays(dp_step.graph_replays());
  report.memory(gather_memory_report(*s.comms.main, dp_step.memory()));
  report.finish(at.step - start.step, at.epoch - start.epoch + (at.step_in_epoch > 0 ? 1 : 0), final_loss,
                last_eval ? std::optional<double>(last_eval->accuracy) : std::nullopt, stopped.empty(), model, s.scaler,
                checksum);
  if (stopped.empty()) return 0;
  // Exit 75 promises a checkpoint to continue from (jobs/preemptible.sbatch requeues on it);
  // a stop without one must not be requeued to start from step 0 again.
  if (!setup->checkpoints->enabled()) {
    if (ctx.world_rank() == 0)
      log::warn(
          "stopped: {} after step {} of {} without a checkpoint (checkpoint.enabled = false): nothing to "
          "continue from (exit code 1)",
          stopped, at.step, s.total_steps);
    return 1;
  }
  log::info("stopped: {} after step {} of {}; continue with --set run.dir={} --set train.resume=auto (exit code {})",
            stopped, at.step, s.total_steps, tc.run_dir, kExitResumable);
  StopSignals::keep_until_exit();
  return kExitResumable;
}

}  // namespace ringtrain
