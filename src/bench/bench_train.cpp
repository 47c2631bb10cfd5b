// `ringtrain bench train CONFIG`: the training step of a config, timed: warm-up steps, then
// timed steps on real batches (the loader, as in training) or synthetic ones (--synthetic:
// random inputs of the dataset's sample shape, made once, so no I/O or decoding is timed).
// Reports samples/s, the step-time breakdown (data wait, forward, backward, exposed
// communication, optimizer), gradient bytes and the busbw the allreduce reached inside the
// step; with --layers (host models) each layer's forward and backward time and GFLOP/s.
// Medians per rank; global figures use the slowest rank's median (ranks step in lockstep).
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "bench/bench_stats.hpp"
#include "ringtrain/bench/bench.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/data/dataset.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/grad_scaler.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/train/batch_source.hpp"
#include "ringtrain/train/data_parallel_step.hpp"
#include "ringtrain/train/memory_report.hpp"
#include "ringtrain/train/run_comms.hpp"
#include "ringtrain/train/session.hpp"
#include "ringtrain/train/synthetic_batch.hpp"
#include "ringtrain/train/train_config.hpp"

namespace ringtrain {
namespace {

using Clock = std::chrono::steady_clock;

// One step's parts, in seconds.
struct StepParts {
  double data = 0, forward = 0, backward = 0, exposed = 0, optimizer = 0, allreduce = 0, allgather = 0, total = 0;
};

template <typename F>
double median_of(const std::vector<StepParts>& steps, F field) {
  std::vector<double> v;
  v.reserve(steps.size());
  for (const auto& s : steps) v.push_back(field(s));
  return median(v);
}

// Rank 0's median per layer of the timed steps' forward and backward times, with the GFLOP/s
// each reached (backward counted as 2x forward, as train_flops_per_sample does).
nlohmann::json layer_report(const Model& model, const std::vector<Model::LayerTimes>& steps, std::int64_t batch) {
  nlohmann::json layers = nlohmann::json::array();
  for (std::size_t i = 0; i < model.num_layers(); ++i) {
    std::vector<double> fwd, bwd;
    for (const Model::LayerTimes& t : steps) {
      fwd.push_back(t.forward[i]);
      bwd.push_back(t.backward[i]);
    }
    const double f = median(fwd), b = median(bwd);
    const double flops = static_cast<double>(model.layer_forward_flops(i) * batch);
    layers.push_back({{"index", i},
                      {"kind", model.layer_kind(i)},
                      {"name", model.layer_name(i)},
                      {"done_by", model.layer_done_by(i)},
                      {"forward_ms", 1e3 * f},
                      {"backward_ms", 1e3 * b},
                      {"forward_gflops", f > 0 ? flops / f / 1e9 : 0.0},
                      {"backward_gflops", b > 0 ? 2.0 * flops / b / 1e9 : 0.0}});
  }
  return layers;
}

// One row per layer, "[index] kind name" padded to the longest so the columns line up.
void print_layers(const nlohmann::json& layers, double step_ms) {
  std::vector<std::string> labels;
  std::size_t width = 0;
  for (const nlohmann::json& l : layers) {
    const auto name = l["name"].get<std::string>();
    labels.push_back(fmt::format("[{}] {}{}", l["index"].get<std::size_t>(), l["kind"].get<std::string>(),
                                 name.empty() ? "" : " " + name));
    width = std::max(width, labels.back().size());
  }
  log::info("  per layer (rank 0, medians): forward ms (GFLOP/s) | backward ms (GFLOP/s) | share of the step");
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const nlohmann::json& l = layers[i];
    const auto done_by = l["done_by"].get<std::size_t>();
    if (done_by != l["index"].get<std::size_t>()) {
      log::info("  {:<{}}  done by [{}]", labels[i], width, done_by);
      continue;
    }
    const double f = l["forward_ms"].get<double>(), b = l["backward_ms"].get<double>();
    log::info("  {:<{}} {:>8.3f} ({:>6.1f}) | {:>8.3f} ({:>6.1f}) | {:>5.1f}%", labels[i], width, f,
              l["forward_gflops"].get<double>(), b, l["backward_gflops"].get<double>(), 100.0 * (f + b) / step_ms);
  }
}

}  // namespace

void bench_train(Context& ctx, const TrainBenchOptions& o) {
  const std::unique_ptr<Session> session =
      open_session(ctx, o.config, o.overrides,
                   {.data = o.synthetic ? SessionOptions::Data::shape : SessionOptions::Data::samples,
                    .schedule_steps = o.warmup + o.steps});
  const TrainConfig& tc = session->tc;
  RunComms& comms = session->comms;
  Model* model = session->model.get();
  LrSchedule* schedule = session->schedule.get();
  const std::int64_t per_rank = tc.batch_size * tc.accumulation_steps;
  const StepOptions options = session_step_options(*session, ctx);
  Communicator& stats = *comms.main;
  // The parameters first, as in training: at ZeRO stage 3 the step keeps only this rank's shard.
  start_from_root_params(*model, stats, tc.seed);
  // fp16 scales the loss as in training (session->scaler); skipped steps still count
  DataParallelStep step(*model, *session->optimizer, stats, *comms.gradient, tc.batch_size, options, nullptr,
                        &session->scaler);

  std::unique_ptr<BatchSource> loader;
  SyntheticBatch synthetic;
  if (o.synthetic) {
    synthetic = make_synthetic_batch(*model, per_rank,
                                     stream_key(tc.seed, 0x73796e74, static_cast<std::uint64_t>(ctx.world_rank()), 0));
  } else {
    run_collectively(ctx, [&] {
      const std::int64_t spe = session->steps_per_epoch;
      const std::int64_t epochs = (o.warmup + o.steps + spe - 1) / spe;
      loader = for_data_key("data.train", [&] {
        if (session->tokens()) {
          TokenLoaderOptions lo = token_loader_options(tc, ctx.world_size(), ctx.world_rank(), true);
          lo.epochs = epochs;
          return make_batch_source(session->train_tokens, lo);
        }
        LoaderOptions lo = loader_options(tc, ctx.world_size(), ctx.world_rank(), true);
        lo.epochs = epochs;
        return make_batch_source(session->train, lo);
      });
    });
  }

  Model::LayerTimes layer_times;
  std::vector<Model::LayerTimes> timed_layers;
  if (o.layers) run_collectively(ctx, [&] { model->set_layer_times(&layer_times); });
  std::vector<StepParts> timed;
  // On the GPU the synthetic batch is staged again while each step runs, as training stages its
  // next batch (DataParallelStep::set_upcoming), so its copy overlaps the step here too.
  if (o.synthetic && model->device() == Device::cuda)
    step.set_upcoming([&] { step.stage_next(synthetic.x, synthetic.labels.data()); });
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    const auto t0 = Clock::now();
    const SourceBatch batch = o.synthetic ? SourceBatch{} : loader->next();
    const Tensor& x = o.synthetic ? synthetic.x : batch.images != nullptr ? batch.images->x : batch.x;
    const std::int32_t* labels = o.synthetic ? synthetic.labels.data() : batch.labels;
    const auto t1 = Clock::now();
    const StepResult r =
        step.run(x, labels, StepInfo{true, tc.seed, i, ctx.world_rank()}, static_cast<float>(schedule->at(i)));
    const double data_s = std::chrono::duration<double>(t1 - t0).count();
    if (i >= o.warmup)
      timed.push_back({data_s, r.forward_s, r.backward_s, r.exposed_s, r.optimizer_s, r.allreduce_s, r.allgather_s,
                       data_s + r.compute_s + r.exposed_s});
    if (o.layers) {
      if (i >= o.warmup) timed_layers.push_back(layer_times);
      model->set_layer_times(&layer_times);  // zeroed for the next step
    }
  }
  if (o.layers) model->set_layer_times(nullptr);
  const double step_s = median_of(timed, [](const StepParts& s) { return s.total; });
  const double slowest_step_s = max_of(gather(stats, ctx, step_s));
  const int world = ctx.world_size();
  const double global_rate = static_cast<double>(per_rank * world) / slowest_step_s;
  const double allreduce_s = median_of(timed, [](const StepParts& s) { return s.allreduce; });
  const std::int64_t grad_bytes = model->arena_elements() * static_cast<std::int64_t>(sizeof(float));
  const double algbw = allreduce_s > 0 ? static_cast<double>(grad_bytes) / allreduce_s / 1e9 : 0.0;
  const double busbw = algbw * 2.0 * (world - 1) / world;
  auto ms = [&](auto field) { return 1e3 * median_of(timed, field); };
  nlohmann::json j = {{"bench", "train"},
                      {"config", o.config},
                      {"synthetic", o.synthetic},
                      {"ranks", world},
                      {"nodes", ctx.node_count()},
                      {"backend", device_name(ctx.binding().backend)},
                      {"precision", precision_name(tc.precision)},
                      {"threads_per_rank", ctx.binding().threads},
                      {"per_rank_batch", per_rank},
                      {"global_batch", per_rank * world},
                      {"warmup_steps", o.warmup},
                      {"timed_steps", o.steps},
                      {"samples_per_s", global_rate},
                      {"samples_per_s_per_rank", global_rate / world},
                      {"step_ms", 1e3 * slowest_step_s},
                      {"step_ms_this_rank", 1e3 * step_s},
                      {"data_wait_ms", ms([](const StepParts& s) { return s.data; })},
                      {"forward_ms", ms([](const StepParts& s) { return s.forward; })},
                      {"backward_ms", ms([](const StepParts& s) { return s.backward; })},
                      {"exposed_comm_ms", ms([](const StepParts& s) { return s.exposed; })},
                      {"optimizer_ms", ms([](const StepParts& s) { return s.optimizer; })},
                      {"allreduce_ms", 1e3 * allreduce_s},
                      {"overlap", step.overlapped()},
                      {"cuda_graph", step.graphed()},  // false when not asked for, refused, or the capture failed
                      {"cuda_graph_replays", step.graph_replays()},
                      {"buckets", step.num_buckets()},
                      {"bucket_mb", options.bucket_mb},
                      {"grad_bytes", grad_bytes},
                      {"wire_dtype", dtype_name(tc.wire_dtype)},
                      {"allreduce", comms.gradient->name()},
                      {"allreduce_algbw_GBps", algbw},
                      {"allreduce_busbw_GBps", busbw},
                      {"params", model->num_params()},
                      {"flops_per_sample", model->train_flops_per_sample()}};
  if (session->tokens()) j["tokens_per_s"] = global_rate * static_cast<double>(tc.data.block_size);
  // On the GPU without monitor.phase_timing the host only queues the phases: their times are the
  // queueing, not the device's (the step's total is the device's either way).
  const bool phases_timed = model->device() != Device::cuda || tc.phase_timing;
  j["phases_timed"] = phases_timed;
  const MemoryReport memory = gather_memory_report(stats, step.memory());
  j["zero_stage"] = tc.zero_stage;
  j["allgather_ms"] = ms([](const StepParts& s) { return s.allgather; });
  for (const auto& [name, bytes] : memory.fields()) j["memory"][std::string(name)] = bytes;
  if (o.layers) j["layers"] = layer_report(*model, timed_layers, per_rank);
  if (o.json) {
    log::info("{}", j.dump());
    return;
  }
  log::info(
      "bench train: {} on {} rank{} ({}, {}), {} batches of {} per rank ({} global), medians of {} steps after {} "
      "warm-up",
      o.config, world, world > 1 ? "s" : "", device_name(ctx.binding().backend), precision_name(tc.precision),
      o.synthetic ? "synthetic" : "real", per_rank, per_rank * world, o.steps, o.warmup);
  log::info(
      "  {:.0f} samples/s ({:.0f} per rank), step {:.2f} ms (the slowest rank's median); rank 0's parts, each "
      "its own median (so they need not add up to the step{}): data {:.2f}, forward {:.2f}, backward {:.2f}, "
      "exposed comm {:.2f}, optimizer {:.2f} ms",
      global_rate, global_rate / world, 1e3 * slowest_step_s,
      phases_timed ? "" : "; on the GPU the time to queue them: monitor.phase_timing = true times the device's",
      j["data_wait_ms"].get<double>(), j["forward_ms"].get<double>(), j["backward_ms"].get<double>(),
      j["exposed_comm_ms"].get<double>(), j["optimizer_ms"].get<double>());
  log::info(
      "  gradients {:.2f} MB in {} bucket{}, allreduce {:.2f} ms per step ({}): algbw {:.2f} GB/s, busbw {:.2f} "
      "GB/s",
      static_cast<double>(grad_bytes) / 1e6, step.num_buckets(), step.num_buckets() == 1 ? "" : "s", 1e3 * allreduce_s,
      step.overlapped() ? "overlapped with backward" : "after backward", algbw, busbw);
  if (tc.zero_stage == 3)
    log::info(
        "  ZeRO stage 3: gradients reduce-scattered, each bucket's parameters gathered around its forward and "
        "backward (waits counted in their times)");
  else if (tc.zero_stage > 0)
    log::info("  ZeRO stage {}: gradients reduce-scattered, parameters allgathered after the update ({:.2f} ms)",
              tc.zero_stage, j["allgather_ms"].get<double>());
  log::info("  memory per rank (largest): {}", memory.describe());
  if (o.layers) print_layers(j["layers"], 1e3 * step_s);
}

}  // namespace ringtrain
