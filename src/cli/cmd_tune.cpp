// `ringtrain tune batch CONFIG`: the per-rank batch sizes, powers of two, whose training state
// fits --memory-limit (checked before each size is allocated), timed with the config's real
// model, optimizer and gradient allreduce on synthetic inputs, and the knee of the throughput
// curve, decided on rank 0 from every rank's timings and broadcast. data.train is opened for
// its sample shape and size only (stream strategy: labels are read, samples never). On a GPU
// the sizes are allocated there, and one that runs out of device memory on any rank ends the search.
#include <malloc.h>

// RINGTRAIN_ADDRESS_SANITIZER: built with AddressSanitizer (GCC defines __SANITIZE_ADDRESS__,
// clang answers __has_feature).
#if defined(__SANITIZE_ADDRESS__)
#define RINGTRAIN_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RINGTRAIN_ADDRESS_SANITIZER 1
#endif
#endif
#if RINGTRAIN_ADDRESS_SANITIZER
#include <sanitizer/allocator_interface.h>
#endif

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>

#include "bench/bench_stats.hpp"
#include "cli/commands.hpp"
#include "cli/number_checks.hpp"
#include "cuda/gpu_backend.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/watchdog.hpp"
#include "ringtrain/train/run_comms.hpp"
#include "ringtrain/core/bytes.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/data/dataset.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"
#include "ringtrain/tensor/memory_pool.hpp"
#include "ringtrain/train/batch_tuner.hpp"
#include "ringtrain/train/memory_report.hpp"
#include "ringtrain/train/data_parallel_step.hpp"
#include "ringtrain/train/session.hpp"
#include "ringtrain/train/synthetic_batch.hpp"
#include "ringtrain/train/train_config.hpp"

namespace ringtrain {
namespace {

using Clock = std::chrono::steady_clock;

struct TuneOptions {
  std::string config;
  ConfigOverrides sets;
  std::int64_t min_batch = 8;
  std::int64_t max_batch = 4096;
  int steps = 5;   // per round
  int warmup = 2;  // per round
  int rounds = 3;
  std::string memory_limit;  // empty: kDefaultMemoryShare of MemAvailable over the node's ranks; a GPU's total
  bool json = false;
};

// What one batch size costs, from its start. CPU: small tensors and layer workspaces come from
// malloc and large tensors are mapped, so the heap in use (all arenas plus mmapped chunks) and
// the mapped tensors grow by it, without the noise of the resident set. GPU: every device
// tensor and workspace comes from the pool, whose peak in use since the start (cache emptied,
// peak reset) is what the size needed at once.
class MemoryMeter {
 public:
  explicit MemoryMeter(bool gpu) : gpu_(gpu) {
    if (gpu_) {
      gpu_pool().empty_cache();
      gpu_pool().reset_peak();
    }
    start_ = now();
  }
  double used() const { return now() - start_; }

 private:
  double now() const {
    if (gpu_) return static_cast<double>(gpu_pool().stats().peak_in_use);
    return heap_bytes_in_use() + static_cast<double>(host_mapped_bytes());
  }
  static MemoryPool& gpu_pool() { return gpu("tune --backend cuda").pool(); }
  // glibc's count of its heap, or, in a build with AddressSanitizer (whose allocator replaces
  // glibc's, so mallinfo2 sees nothing), the sanitizer's own.
  static double heap_bytes_in_use() {
#if RINGTRAIN_ADDRESS_SANITIZER
    return static_cast<double>(__sanitizer_get_current_allocated_bytes());
#else
    const struct mallinfo2 m = mallinfo2();
    return static_cast<double>(m.uordblks + m.hblkhd);
#endif
  }
  bool gpu_;
  double start_ = 0.0;
};

std::string read_text(const char* path) {
  std::ifstream f(path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

struct Tuner {
  std::unique_ptr<Session> session;                  // its model and optimizer are dropped: every size builds its own
  std::optional<Config> model_config, optim_config;  // rebuilt for every batch size
  TrainConfig tc;
  Communicator* comm = nullptr;             // set-up and statistics (the session's)
  Communicator* grad_comm = nullptr;        // gradient buckets, as in training
  std::unique_ptr<Communicator> self_comm;  // GPU: this rank alone, for the rehearsal step of each size
  bool gpu = false;                         // bound to a GPU: the sizes are allocated there
  ComputeOptions compute;
  StepOptions step_options;
  Shape sample_shape;
  std::int64_t num_classes = 0;
  std::int64_t data_vocab_size = 0;  // token data: its vocabulary (a language model's default)
  std::int64_t num_params = 0;       // the model's parameters
  std::int64_t fewest_samples = 1;   // its Model::min_training_batch: no size below it is run
  std::int64_t arena_elements = 0;   // of its parameter arena (pads between tensors included)
  std::int64_t usable_samples = 0;
  std::int64_t memory_limit = 0;
  std::string memory_limit_source;
  std::vector<std::string> notes;
};

// Config, limit, binding and communicators; the dataset's shape; one model and optimizer
// built to validate the config (unknown keys are errors, as in training). Collective phases
// like the trainer's, so bad input ends every rank with the same one-line error.
std::unique_ptr<Tuner> set_up(Context& ctx, const TuneOptions& o) {
  auto t = std::make_unique<Tuner>();
  run_collectively(ctx, [&] {
    RT_REQUIRE(o.max_batch >= o.min_batch, ConfigError, "--max-batch {} is below --min-batch {}", o.max_batch,
               o.min_batch);
    if (!o.memory_limit.empty()) {
      try {
        t->memory_limit = parse_byte_size(o.memory_limit);
      } catch (const ConfigError& e) {
        throw ConfigError(fmt::format("--memory-limit: {}", e.what()));
      }
      t->memory_limit_source = "--memory-limit";
    }
  });
  t->session = open_session(ctx, o.config, o.sets, {.data = SessionOptions::Data::shape, .schedule_steps = 1});
  Session& s = *t->session;
  t->num_params = s.model->num_params();
  t->fewest_samples = s.model->min_training_batch();
  t->arena_elements = s.model->arena_elements();
  s.pruner.reset();  // before the model it refers to
  s.model.reset();
  s.optimizer.reset();
  t->tc = s.tc;
  if (t->tc.accumulation_steps > 1)
    t->notes.push_back(
        fmt::format("train.accumulation_steps = {} is not used: memory and speed are per "
                    "micro-batch, so the batch tuned is train.batch_size",
                    t->tc.accumulation_steps));
  t->gpu = ctx.binding().backend == Device::cuda;
  t->compute = compute_options(t->tc, ctx);
  t->comm = s.comms.main.get();
  t->grad_comm = s.comms.gradient.get();
  t->sample_shape = s.sample_shape;
  t->usable_samples = s.train_samples();
  t->data_vocab_size = s.train_tokens ? s.train_tokens->vocab_size() : 0;
  t->num_classes = s.num_classes;
  t->model_config = s.config->section("model");
  t->optim_config = s.config->section("optim");
  double device_total = 0.0;
  run_collectively(ctx, [&] {
    if (!t->gpu) return;
    t->self_comm = make_mpi_self_communicator(AllreduceAlgo::ring);
    device_total = static_cast<double>(gpu("tune --backend cuda").make_memory()->info().total);
  });
  if (t->memory_limit == 0 && t->gpu) {
    t->memory_limit = static_cast<std::int64_t>(min_of(gather(*t->comm, ctx, device_total)));
    t->memory_limit_source = "the GPU's total memory, smallest over ranks";
  } else if (t->memory_limit == 0) {
    const double available = min_of(
        gather(*t->comm, ctx, static_cast<double>(proc_kib_field_bytes(read_text("/proc/meminfo"), "MemAvailable"))));
    if (available <= 0.0)
      throw CollectiveError("/proc/meminfo has no MemAvailable: give the bound with --memory-limit");
    t->memory_limit = default_memory_limit(static_cast<std::int64_t>(available), ctx.local_size());
    t->memory_limit_source = fmt::format("{:.0f}% of MemAvailable {} / local ranks {}", 100 * kDefaultMemoryShare,
                                         format_bytes(available), ctx.local_size());
  }
  t->step_options = session_step_options(s, ctx);
  t->step_options.accumulation_steps = 1;  // the batch tuned is one micro-batch (see the note above)
  return t;
}

struct SizeRun {
  std::vector<int> out_of_memory_ranks;  // GPU: where the size ran out of device memory (then nothing below is set)
  double fixed_bytes = 0.0;              // held before any batch buffer: arenas, optimizer state, step
  double total_bytes = 0.0;              // after the steps: everything the batch size needs
  double median_step_s = 0.0;
};

// A fresh model, optimizer and step at `batch` (the previous size's are freed first, so sizes
// never overlap in memory), warm-up, then timed steps in lockstep with the real allreduce.
// Everything the size allocates is allocated before the first collective of its steps: on a
// GPU by a rehearsal step on this rank alone (one-rank communicator), whose buffers the real
// step then takes from the pool's cache. An OutOfMemory there is agreed on by every rank, so
// a rank that runs out never leaves the others waiting in an allreduce (one in the timed steps,
// not expected since they reuse the rehearsal's blocks, ends the job through main's abort).
SizeRun run_size(Tuner& t, const Context& ctx, std::int64_t batch, int warmup, int steps) {
  constexpr std::uint64_t kSyntheticStream = 0x7e5e'0000'0000'0000ull;
  const MemoryMeter meter(t.gpu);
  SizeRun r;
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;  // its schedule is not needed: every step runs at learning rate 0
  std::unique_ptr<DataParallelStep> step;
  SyntheticBatch synthetic;
  const auto make_step = [&](Communicator& stats_comm, Communicator& grad_comm) {
    return std::make_unique<DataParallelStep>(*model, *optimizer, stats_comm, grad_comm, batch, t.step_options,
                                              nullptr);
  };
  bool out_of_memory = false;
  run_collectively(ctx, [&] {
    try {
      model = build_model(*t.model_config, t.sample_shape, t.compute, t.data_vocab_size);
      model->init_params(t.tc.seed);  // identical on every rank, as the trainer's broadcast makes it
      Communicator& stats_comm = t.gpu ? *t.self_comm : *t.comm;
      optimizer = build_optimizer(*t.optim_config, t.arena_elements, warmup + steps, model->device(), false,
                                  step_owned_ranges(*model, t.step_options, stats_comm.size(), stats_comm.rank()))
                      .optimizer;
      step = t.gpu ? make_step(*t.self_comm, *t.self_comm) : make_step(*t.comm, *t.grad_comm);
      r.fixed_bytes = meter.used();
      synthetic = make_synthetic_batch(*model, batch,
                                       stream_key(t.tc.seed, kSyntheticStream, static_cast<std::uint64_t>(batch),
                                                  static_cast<std::uint64_t>(ctx.world_rank())));
      if (t.gpu) {
        try {
          step->run(synthetic.x, synthetic.labels.data(), StepInfo{true, t.tc.seed, 0, ctx.world_rank()}, 0.0f);
        } catch (const CollectiveError& e) {  // from the one-rank step: this rank's alone, agreed on below
          throw Error(e.what());
        }
        step.reset();
        step = make_step(*t.comm, *t.grad_comm);
      }
    } catch (const OutOfMemory& e) {
      log::warn("batch {} does not fit: {}", batch, e.what());
      out_of_memory = true;
    }
  });
  r.out_of_memory_ranks = ranks_where(*t.comm, ctx, out_of_memory);
  if (!r.out_of_memory_ranks.empty()) return r;
  std::vector<double> times;
  t.comm->barrier();
  for (int i = 0; i < warmup + steps; ++i) {
    const auto start = Clock::now();
    // Learning rate 0: random data must not drive the parameters anywhere non-finite; the
    // update costs the same.
    step->run(synthetic.x, synthetic.labels.data(), StepInfo{true, t.tc.seed, i, ctx.world_rank()}, 0.0f);
    if (i >= warmup) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  // ZeRO stage 3 keeps only its shard of the parameter arena (its gathered copies are buffers of
  // their own): the rest of the arena is mapped but not held.
  const auto unheld =
      static_cast<double>(std::max<std::int64_t>(0, model->parameter_bytes() - step->memory().parameters));
  r.fixed_bytes -= unheld;
  r.total_bytes = meter.used() - unheld;
  r.median_step_s = median(times);
  return r;
}

struct Row {
  std::int64_t batch = 0;
  double estimated_bytes = 0.0;      // before allocating: the memory model of the sizes before it
  double measured_bytes = 0.0;       // largest rank
  std::vector<double> round_step_s;  // per round, the slowest rank's median
  double step_s = 0.0;               // median over the rounds
};

double samples_per_s(const Row& r) { return static_cast<double>(r.batch) / r.step_s; }

std::string row_line(const Row& r, const Row* previous, int world) {
  const std::string gain =
      previous == nullptr ? "-"
                          : fmt::format("{:+.1f}%", 100.0 * throughput_gain({previous->batch, samples_per_s(*previous)},
                                                                            {r.batch, samples_per_s(r)}));
  return fmt::format("{:>7} {:>12} {:>12} {:>9.2f} {:>16.0f} {:>17.0f} {:>8}", r.batch, format_bytes(r.estimated_bytes),
                     format_bytes(r.measured_bytes), 1e3 * r.step_s, samples_per_s(r), samples_per_s(r) * world, gain);
}

std::string stop_message(SearchStop stop, std::int64_t batch, double estimate,
                         const std::vector<int>& out_of_memory_ranks, const Tuner& t, const TuneOptions& o, int world) {
  switch (stop) {
    case SearchStop::max_batch: return fmt::format("batch {} is over --max-batch {}", batch, o.max_batch);
    case SearchStop::dataset:
      return fmt::format("batch {} x {} ranks is more than the {} training samples", batch, world, t.usable_samples);
    case SearchStop::memory_limit:
      return fmt::format("batch {} would need an estimated {}, over the memory limit {}: not allocated", batch,
                         format_bytes(estimate), format_bytes(static_cast<double>(t.memory_limit)));
    case SearchStop::out_of_memory:
      return fmt::format("batch {} ran out of GPU memory on {} (estimated {}): it fits on no rank", batch,
                         ranks_text(out_of_memory_ranks), format_bytes(estimate));
    case SearchStop::none: break;
  }
  return "";
}

std::string_view stop_name(SearchStop stop) {
  switch (stop) {
    case SearchStop::max_batch: return "max_batch";
    case SearchStop::dataset: return "dataset";
    case SearchStop::memory_limit: return "memory_limit";
    case SearchStop::out_of_memory: return "out_of_memory";
    case SearchStop::none: break;
  }
  return "none";
}

int tune_batch(Context& ctx, const TuneOptions& o) {
  const std::unique_ptr<Tuner> tp = set_up(ctx, o);
  Tuner& t = *tp;
  const int world = ctx.world_size();
  const bool table = !o.json;
  for (const auto& note : t.notes)
    if (table) log::info("note: {}", note);
  if (table) {
    const std::string device = t.gpu ? std::string("one GPU per rank (cuda)")
                                     : fmt::format("compute threads per rank {} (cpu)", ctx.binding().threads);
    log::info("tune batch: {}, ranks {}, {}, allreduce {}, overlap {}", o.config, world, device, t.grad_comm->name(),
              t.step_options.overlap ? "on" : "off");
    log::info("model: {} parameters, input {}, {} classes; synthetic inputs (data.train read for its shape and size)",
              t.num_params, t.sample_shape.str(), t.num_classes);
    log::info(
        "memory limit per rank: {} ({}), on parameters, gradients, optimizer state, activations, workspaces and "
        "the batch",
        format_bytes(static_cast<double>(t.memory_limit)), t.memory_limit_source);
    if (t.gpu)
      log::info(
          "GPU memory: measured as the device pool's peak in use (a fresh model per size, the cache emptied "
          "between sizes); a size that runs out of GPU memory on any rank fits on none and ends the search");
    log::info(
        "timing: {} rounds of {} warm-up + {} timed steps per batch size; step ms = the median over rounds of "
        "the slowest rank's median",
        o.rounds, o.warmup, o.steps);
  }

  // The smallest batch the model takes sizes the memory per sample before any larger one is allocated.
  const SizeRun probe = run_size(t, ctx, t.fewest_samples, 0, 1);
  if (!probe.out_of_memory_ranks.empty())
    throw CollectiveError(fmt::format("no batch size to time: batch {} ran out of GPU memory on {}", t.fewest_samples,
                                      ranks_text(probe.out_of_memory_ranks)));
  MemoryModel memory = MemoryModel::fit(max_of(gather(*t.comm, ctx, probe.fixed_bytes)),
                                        max_of(gather(*t.comm, ctx, probe.total_bytes)), t.fewest_samples);
  std::vector<Row> rows;
  SearchStop stop = SearchStop::none;
  std::vector<int> out_of_memory_ranks;
  std::int64_t batch = std::max(o.min_batch, t.fewest_samples);
  for (;; batch *= 2) {
    const double estimate = memory.at(batch);
    stop = search_stop(batch, o.max_batch, t.usable_samples / world, estimate, t.memory_limit);
    if (stop != SearchStop::none) break;
    const SizeRun r = run_size(t, ctx, batch, o.warmup, o.steps);
    if (!r.out_of_memory_ranks.empty()) {
      stop = SearchStop::out_of_memory;
      out_of_memory_ranks = r.out_of_memory_ranks;
      break;
    }
    const double fixed = max_of(gather(*t.comm, ctx, r.fixed_bytes));
    const double total = max_of(gather(*t.comm, ctx, r.total_bytes));
    rows.push_back(Row{batch, estimate, total, {max_of(gather(*t.comm, ctx, r.median_step_s))}});
    memory = MemoryModel::fit(fixed, total, batch);
    if (table)
      log::info("round 1: batch {} fits (estimated {}, used {}): {:.2f} ms per step", batch, format_bytes(estimate),
                format_bytes(total), 1e3 * rows.back().round_step_s.back());
  }
  const std::string stopped = stop_message(stop, batch, memory.at(batch), out_of_memory_ranks, t, o, world);
  if (rows.empty())
    throw CollectiveError(fmt::format("no batch size to time: {} (model {}, {} per sample)", stopped,
                                      format_bytes(memory.fixed_bytes), format_bytes(memory.per_sample_bytes)));
  // Later rounds re-time the sizes found, in alternating order, so background load that comes
  // and goes spreads over all sizes instead of landing on a few (shared machines).
  for (int round = 2; round <= o.rounds; ++round) {
    for (std::size_t k = 0; k < rows.size(); ++k) {
      Row& row = rows[round % 2 == 0 ? rows.size() - 1 - k : k];
      const SizeRun r = run_size(t, ctx, row.batch, o.warmup, o.steps);
      if (!r.out_of_memory_ranks.empty())
        throw CollectiveError(
            fmt::format("batch {} fitted in round 1 but ran out of GPU memory in round {} on {}; "
                        "run again with --max-batch {}",
                        row.batch, round, ranks_text(r.out_of_memory_ranks), row.batch / 2));
      row.round_step_s.push_back(max_of(gather(*t.comm, ctx, r.median_step_s)));
    }
    if (table) log::info("round {} of {} done", round, o.rounds);
  }
  for (Row& row : rows) row.step_s = median(row.round_step_s);
  const auto estimated_within_limit = static_cast<std::int64_t>(
      (static_cast<double>(t.memory_limit) - memory.fixed_bytes) / std::max(1.0, memory.per_sample_bytes));
  // A size that ran out of GPU memory bounds the estimate (the device also holds what the pool does not count).
  const std::int64_t within_limit =
      stop == SearchStop::out_of_memory ? std::min(estimated_within_limit, batch - 1) : estimated_within_limit;

  std::vector<BatchPoint> points;
  points.reserve(rows.size());
  for (const Row& r : rows) points.push_back({r.batch, samples_per_s(r)});
  const KneeChoice knee = choose_knee(points);
  // Rank 0 decides; every rank holds the same gathered timings, so each must agree with it.
  std::int64_t chosen = ctx.world_rank() == 0 ? rows[knee.index].batch : 0;
  t.comm->broadcast(&chosen, sizeof(chosen), 0);
  if (max_of(gather(*t.comm, ctx, chosen == rows[knee.index].batch ? 0.0 : 1.0)) > 0.0)
    throw CollectiveError("tune batch: ranks disagree on the choice (a bug: their timings were gathered alike)");
  const double peak_rss = max_of(gather(*t.comm, ctx, static_cast<double>(own_peak_rss())));

  if (table) {
    log::info("{:>7} {:>12} {:>12} {:>9} {:>16} {:>17} {:>8}", "batch", "est. memory", "measured", "step ms",
              "samples/s/rank", "samples/s global", "gain");
    for (std::size_t i = 0; i < rows.size(); ++i)
      log::info("{}", row_line(rows[i], i > 0 ? &rows[i - 1] : nullptr, world));
    log::info("stopped: {}", stopped);
    // fit() counts what a batch size does not change (workspaces made once) as per sample: the
    // estimate errs low, the more so the smaller the largest batch measured.
    log::info(
        "largest batch within the memory limit: {}{} (from batch {}'s memory: {} + {} per sample, what does not "
        "grow with the batch counted as if it did)",
        stop == SearchStop::out_of_memory ? "" : "at least ", within_limit, rows.back().batch,
        format_bytes(memory.fixed_bytes), format_bytes(memory.per_sample_bytes));
    log::info("choice: batch {} per rank (global {}): {}; the config has train.batch_size = {}", chosen, chosen * world,
              knee.reason, t.tc.batch_size);
    log::info("peak resident memory: {} (largest rank; includes MPI and libraries, which the limit does not count)",
              format_bytes(peak_rss));
    return 0;
  }
  nlohmann::json j_rows = nlohmann::json::array();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    nlohmann::json row = {{"batch", r.batch},
                          {"estimated_bytes", r.estimated_bytes},
                          {"measured_bytes", r.measured_bytes},
                          {"step_ms", 1e3 * r.step_s},
                          {"step_ms_per_round", r.round_step_s},
                          {"samples_per_s_per_rank", points[i].samples_per_s},
                          {"samples_per_s_global", points[i].samples_per_s * world},
                          {"gain", nullptr}};
    if (i > 0) row["gain"] = throughput_gain(points[i - 1], points[i]);
    j_rows.push_back(row);
  }
  const nlohmann::json j = {{"tune", "batch"},
                            {"config", o.config},
                            {"world_size", world},
                            {"backend", device_name(ctx.binding().backend)},
                            {"threads_per_rank", ctx.binding().threads},
                            {"allreduce", t.grad_comm->name()},
                            {"overlap", t.step_options.overlap},
                            {"parameters", t.num_params},
                            {"sample_shape", t.sample_shape.dims()},
                            {"classes", t.num_classes},
                            {"memory_limit_bytes", t.memory_limit},
                            {"memory_limit_source", t.memory_limit_source},
                            {"memory_fixed_bytes", memory.fixed_bytes},
                            {"memory_per_sample_bytes", memory.per_sample_bytes},
                            {"largest_batch_within_limit", within_limit},
                            {"warmup", o.warmup},
                            {"steps", o.steps},
                            {"rounds", o.rounds},
                            {"rows", j_rows},
                            {"stopped", {{"reason", stop_name(stop)}, {"batch", batch}, {"message", stopped}}},
                            {"choice", {{"batch", chosen}, {"global_batch", chosen * world}, {"reason", knee.reason}}},
                            {"config_batch_size", t.tc.batch_size},
                            {"ranks_agree", true},
                            {"peak_rss_bytes", peak_rss},
                            {"notes", t.notes}};
  log::info("{}", j.dump());
  return 0;
}

}  // namespace

Command add_tune_command(CLI::App& app) {
  auto* tune = app.add_subcommand("tune", "Tuning helpers");
  tune->require_subcommand(1);
  auto* batch = tune->add_subcommand(
      "batch",
      "The per-rank batch sizes (powers of two) that fit --memory-limit, their training throughput with the "
      "config's model, optimizer and allreduce on synthetic inputs, and the knee: the smallest batch that no "
      "larger one beats by 5% or more (run under mpirun or srun like train). With runtime.backend = cuda and a "
      "GPU bound, sizes are allocated on it, measured by the device pool's peak, and the first size that runs "
      "out of GPU memory on any rank ends the search");
  auto o = std::make_shared<TuneOptions>();
  batch->add_option("config", o->config, "run configuration (TOML), as for train")->required();
  add_config_overrides(*batch, o->sets);
  batch->add_option("--min-batch", o->min_batch, "smallest per-rank batch tried")
      ->check(number_in<std::int64_t>(1, std::int64_t{1} << 30, [](std::int64_t v) {
                return (v & (v - 1)) == 0 ? std::string() : fmt::format("{} is not a power of two", v);
              }).description("INT: a power of two in [1 - 1073741824]"));
  batch->add_option("--max-batch", o->max_batch, "largest per-rank batch tried")
      ->check(number_in(std::int64_t{1}, std::int64_t{1} << 30));
  batch->add_option("--steps", o->steps, "timed steps per batch size and round (their median counts)")
      ->check(number_in(1, 100000));
  batch->add_option("--warmup", o->warmup, "untimed steps before them")->check(number_in(0, 100000));
  batch->add_option("--rounds", o->rounds, "times every size is timed, in alternating order (median over rounds)")
      ->check(number_in(1, 100));
  batch
      ->add_option("--memory-limit", o->memory_limit,
                   fmt::format("per-rank bound on parameters, gradients, optimizer state, activations, workspaces "
                               "and the batch, e.g. 2GiB, 512MiB (default: {:.0f}% of MemAvailable / ranks on the "
                               "node; on a GPU its total memory)",
                               100 * kDefaultMemoryShare))
      ->type_name("SIZE");
  batch->add_flag("--json", o->json, "print one JSON object instead of the table");
  return [o](Context& ctx) { return tune_batch(ctx, *o); };
}

}  // namespace ringtrain
