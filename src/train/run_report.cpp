// RunReport (see header). Rates are over the steps' own time (data + compute + comm), so
// evaluation and logging never inflate or deflate samples/s.
#include "train/run_report.hpp"

#include <cmath>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/version.hpp"
#include "ringtrain/data/dataset.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/train/session.hpp"
#include "ringtrain/optim/grad_scaler.hpp"
#include "ringtrain/runtime/context.hpp"
#include "ringtrain/runtime/slurm.hpp"
#include "ringtrain/train/train_config.hpp"

namespace ringtrain {
namespace {

template <typename F>
double median_of(const std::vector<StepTimes>& t, std::size_t begin, F field) {
  std::vector<double> v;
  for (std::size_t i = begin; i < t.size(); ++i) v.push_back(field(t[i]));
  return median_value(std::move(v));
}

// A rank is flagged slow when its median busy time per step exceeds the median over the ranks by this.
constexpr double kSlowRankFactor = 1.25;
constexpr std::uint64_t kGpuIdleReason = 1;  // NVML's "GPU idle" clocks reason is no limit

// Fields a device does not report are NaN and come out as null.
nlohmann::json gpu_json(const GpuReading& g) {
  return {{"index", g.index},
          {"util_percent", g.util_percent},
          {"mem_used_mib", g.mem_used_mib},
          {"power_w", g.power_w},
          {"temp_c", g.temp_c},
          {"sm_clock_mhz", g.sm_clock_mhz},
          {"throttle_reasons", g.throttle_reasons}};
}

nlohmann::json resource_json(const ResourceSample& s, int rank, std::int64_t global_step) {
  nlohmann::json j = {{"type", "resource"},           {"rank", rank},
                      {"global_step", global_step},   {"t_s", s.t_s},
                      {"cpu_percent", s.cpu_percent}, {"rss_mib", s.rss_mib}};
  if (s.gpu) j["gpu"] = gpu_json(*s.gpu);
  return j;
}

// Without a sample (a run shorter than the interval) CPU utilization is null, not 0.
nlohmann::json ranks_json(const std::vector<RankResources>& ranks) {
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const ResourceSummary& s = ranks[r].summary;
    const auto sampled = [&](double v) { return s.samples > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
    nlohmann::json j = {{"rank", r},
                        {"samples", s.samples},
                        {"cpu_mean_percent", sampled(s.cpu_mean_percent)},
                        {"cpu_max_percent", sampled(s.cpu_max_percent)},
                        {"rss_peak_mib", s.rss_peak_mib},
                        {"median_step_ms", ranks[r].median_step_ms},
                        {"median_busy_ms", ranks[r].median_busy_ms}};
    if (s.gpu)
      j["gpu"] = {{"util_mean_percent", s.gpu_util_mean_percent},
                  {"util_max_percent", s.gpu_util_max_percent},
                  {"mem_peak_mib", s.gpu_mem_peak_mib},
                  {"power_max_w", s.gpu_power_max_w},
                  {"temp_max_c", s.gpu_temp_max_c},
                  {"throttle_reasons", s.gpu_throttle_reasons}};
    out.push_back(j);
  }
  return out;
}

// "/d/a.h5" or "/d/a.h5 and 3 more files".
template <typename Files>
std::string files_of(const Files& f) {
  return f.size() == 1 ? f[0].path : fmt::format("{} and {} more files", f[0].path, f.size() - 1);
}

}  // namespace

std::string with_commas(std::int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return (v < 0 ? "-" : "") + out;
}

std::string hms(double seconds) {
  const auto s = static_cast<std::int64_t>(std::llround(seconds));
  return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
}

std::string count_of(std::int64_t n, std::string_view noun) {
  return fmt::format("{} {}{}", with_commas(n), noun, n == 1 ? "" : "s");
}

double median_value(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1) return *mid;
  return 0.5 * (*mid + *std::max_element(v.begin(), mid));  // the largest of the lower half
}

std::vector<int> slow_ranks(const std::vector<double>& busy_ms) {
  std::vector<int> slow;
  if (busy_ms.size() < 2) return slow;
  const double m = median_value(busy_ms);
  for (std::size_t r = 0; r < busy_ms.size(); ++r)
    if (busy_ms[r] > kSlowRankFactor * m) slow.push_back(static_cast<int>(r));
  return slow;
}

std::string resource_line(std::size_t rank, const RankResources& x, std::int64_t interval_ms) {
  const ResourceSummary& s = x.summary;
  const std::string memory = fmt::format("memory peak {} MiB, busy {:.2f} ms/step",
                                         with_commas(static_cast<std::int64_t>(s.rss_peak_mib)), x.median_busy_ms);
  if (s.samples == 0)
    return fmt::format("  rank {}: no samples (the run was shorter than monitor.interval_ms = {}), {}", rank,
                       interval_ms, memory);
  std::string gpu = "no gpu telemetry";
  if (s.gpu)
    gpu = fmt::format(
        "gpu util mean {:.0f}% max {:.0f}%, gpu memory peak {} MiB, power max {:.0f} W, temp max "
        "{:.0f} C{}",
        s.gpu_util_mean_percent, s.gpu_util_max_percent, with_commas(static_cast<std::int64_t>(s.gpu_mem_peak_mib)),
        s.gpu_power_max_w, s.gpu_temp_max_c,
        (s.gpu_throttle_reasons & ~kGpuIdleReason) != 0
            ? fmt::format(", clocks limited (reasons 0x{:x})", s.gpu_throttle_reasons)
            : std::string());
  return fmt::format("  rank {}: cpu mean {:.0f}% max {:.0f}%, {} | {} ({})", rank, s.cpu_mean_percent,
                     s.cpu_max_percent, memory, gpu, count_of(s.samples, "sample"));
}

RunReport::RunReport(const Context& ctx, const TrainConfig& tc, std::string_view comm_name, std::int64_t start_step)
    : ctx_(ctx), tc_(tc), comm_name_(comm_name), start_step_(start_step) {
  if (ctx.world_rank() == 0) metrics_.emplace(tc.run_dir + "/metrics.jsonl", start_step > 0);
  // A resume from a checkpoint older than the last record logs those steps again: records after
  // this one replace earlier records of the same steps.
  if (metrics_ && start_step > 0)
    metrics_->write(nlohmann::json{{"type", "resume"}, {"global_step", start_step}}.dump());
  // A CPU rank watches the GPU it would bind (local rank mod visible GPUs), if the node has one.
  const auto& b = ctx.binding();
  sampler_ = std::make_unique<ResourceSampler>(static_cast<int>(tc.monitor_interval_ms),
                                               b.backend == Device::cuda ? b.device : ctx.local_rank());
}

namespace {
// The "data:" line's description of the training and test sets.
std::string describe_data(const Session& s) {
  if (s.tokens()) {
    const TokenDataset& t = *s.train_tokens;
    return fmt::format("train {} tokens ({} windows of {}+1, vocabulary {}{}) ({}), test {}", with_commas(t.size()),
                       with_commas(t.windows()), t.block_size(), t.vocab_size(),
                       t.tokenizer().empty() ? std::string() : ", " + t.tokenizer(), files_of(t.files()),
                       s.test_tokens ? with_commas(s.test_tokens->size()) + " tokens" : std::string("none"));
  }
  const auto skipped = [](const Dataset& d) {
    return d.excluded().empty() ? std::string() : fmt::format(" ({} with NaN/Inf skipped)", d.excluded().size());
  };
  const Dataset& train = *s.train;
  return fmt::format("train {} samples{} {} {} ({}), test {}", with_commas(train.size()), skipped(train),
                     sample_type_name(train.sample_type()), train.sample_shape().str(), files_of(train.files()),
                     s.test ? with_commas(s.test->size()) + " samples" + skipped(*s.test) : std::string("none"));
}

}  // namespace

double RunReport::mfu(double samples_per_second) const {
  return samples_per_second * static_cast<double>(flops_per_sample_) / (peak_gflops_ * 1e9 * ctx_.world_size());
}

void RunReport::header(const Session& session, std::int64_t global_batch) {
  const std::string& config_path = session.config_path;
  const std::string& resolved_config = session.resolved_config;
  const Model& model = *session.model;
  steps_per_epoch_ = session.steps_per_epoch;
  global_batch_ = global_batch;
  tokens_per_sample_ = session.tokens() ? session.tc.data.block_size : 0;
  flops_per_sample_ = model.train_flops_per_sample();
  const auto& b = ctx_.binding();
  const auto nodes = gather_node_names(ctx_);  // collective: every rank runs header()
  log::info("ringtrain {} | {} rank{} on {} node{} ({}) | {} ({} thread{}/rank) | {} allreduce | {}{}", version(),
            ctx_.world_size(), ctx_.world_size() > 1 ? "s" : "", ctx_.node_count(), ctx_.node_count() > 1 ? "s" : "",
            join_node_names(nodes), device_name(b.backend), b.threads, b.threads > 1 ? "s" : "", comm_name_,
            precision_name(tc_.precision),
            tc_.precision == DType::f32 ? std::string()
            : tc_.precision == DType::bf16
                ? std::string(" (f32 master weights)")
                : fmt::format(" (f32 master weights, loss scale {:g}{})", tc_.loss_scale.init,
                              tc_.loss_scale.dynamic ? " dynamic" : " static"));
  if (SlurmInfo slurm = slurm_info(); slurm.active()) {
    if (slurm.ntasks != ctx_.world_size()) slurm.ntasks = 0;  // under mpirun: its daemons, not our ranks
    log::info("slurm:  {}", slurm.describe());
  }
  log::info("config: {} (resolved below; also in {}/config.toml)", config_path, tc_.run_dir);
  std::string indented;
  for (std::size_t start = 0; start < resolved_config.size();) {
    const auto end = resolved_config.find('\n', start);
    indented += "  " + resolved_config.substr(start, end - start) + "\n";
    if (end == std::string::npos) break;
    start = end + 1;
  }
  log::info("{}", indented.substr(0, indented.size() - 1));
  const std::string accumulation =
      tc_.accumulation_steps > 1 ? fmt::format(" x {} micro-batches", tc_.accumulation_steps) : std::string();
  log::info("data:   {} | {} strategy, prefetch {} | global batch {} = {} x {}{} | {} steps/epoch",
            describe_data(session), read_strategy_name(tc_.data.strategy), tc_.data.prefetch, global_batch_,
            count_of(ctx_.world_size(), "rank"), tc_.batch_size, accumulation, steps_per_epoch_);
  log::info("model:  {}, {} parameters, {:.1f} MFLOP per training sample",
            count_of(static_cast<std::int64_t>(model.num_layers()), "layer"), with_commas(model.num_params()),
            static_cast<double>(model.train_flops_per_sample()) / 1e6);
  log::info("{}", model.describe().substr(0, model.describe().size() - 1));
  log::info("monitor: {}", sampler_->describe());
}

void RunReport::setup_done(double seconds) const {
  log::info("setup:  {:.2f} s (config, data, model, checkpoint, step and evaluation buffers)", seconds);
}

double RunReport::checked_mfu(double samples_per_second) {
  const double m = mfu(samples_per_second);
  if (m > 1.0 && !warned_mfu_over_one_ && log::rank() == 0) {
    warned_mfu_over_one_ = true;
    log::warn(
        "MFU {:.1f}% is above 100%: the peak it is measured against, {:.1f} GFLOP/s per rank ({}), is below what "
        "training reached (a value set too low, or a CPU busy with other work while it was measured); set "
        "monitor.peak_gflops to "
        "this machine's peak (ringtrain bench gemm)",
        100.0 * m, peak_gflops_, peak_source_);
  }
  return m;
}

void RunReport::peak(double gflops_per_rank, std::string_view source) {
  peak_gflops_ = gflops_per_rank;
  peak_source_ = source;
  if (gflops_per_rank > 0)
    log::info("peak:   {:.1f} GFLOP/s per rank ({}); MFU = training FLOP/s over the ranks' peak", gflops_per_rank,
              source);
}

void RunReport::comm_plan(std::size_t buckets, bool overlap) {
  overlap_ = overlap;
  log::info("comm:   {} gradient bucket{}, {}, watchdog {:g} s", buckets, buckets == 1 ? "" : "s",
            overlap ? "allreduce overlapped with backward" : "allreduce after backward", tc_.timeout_s);
}

void RunReport::cuda_graph(bool graphed, const std::string& refused) {
  if (graphed) {
    log::info("graph:  forward, loss and backward replay as one CUDA graph after warm-up steps (train.cuda_graph)");
  } else if (log::rank() == 0) {  // the same reason on every rank
    log::warn("train.cuda_graph: {}; running without a graph", refused);
  }
}

void RunReport::step(std::int64_t epoch, std::int64_t step_in_epoch, std::int64_t global_step, double loss,
                     double train_accuracy, double lr, const StepTimes& times, std::int64_t total_steps) {
  times_.push_back(times);
  window_loss_ += loss;
  const bool last = global_step + 1 == total_steps;
  if ((global_step + 1) % tc_.log_every != 0 && !last) return;
  const std::size_t n = times_.size() - window_begin_;
  double total = 0.0, data = 0.0, comm = 0.0, allreduce = 0.0;
  for (std::size_t i = window_begin_; i < times_.size(); ++i) {
    total += times_[i].total();
    data += times_[i].data;
    comm += times_[i].comm;
    allreduce += times_[i].allreduce;
  }
  const double rate = static_cast<double>(n * global_batch_) / total;
  const double eta = static_cast<double>(total_steps - global_step - 1) *
                     median_of(times_, window_begin_, [](const StepTimes& t) { return t.total(); });
  const double mean_loss = window_loss_ / static_cast<double>(n);
  const std::string rate_text =
      tokens_per_sample_ > 0
          ? fmt::format("{:>9} tokens/s",
                        with_commas(static_cast<std::int64_t>(rate * static_cast<double>(tokens_per_sample_))))
          : fmt::format("{:>9} samples/s", with_commas(static_cast<std::int64_t>(rate)));
  const std::string mfu_text =
      peak_gflops_ > 0 ? fmt::format("  MFU {:.1f}%", 100.0 * checked_mfu(rate)) : std::string();
  log::info("epoch {}/{}  step {:>5}/{}  loss {:.4f}  {}{}  data {:.1f}%  comm exposed {:.1f}%  lr {:.4g}  eta {}",
            epoch + 1, tc_.epochs, step_in_epoch + 1, steps_per_epoch_, mean_loss, rate_text, mfu_text,
            100.0 * data / total, 100.0 * comm / total, lr, hms(eta));
  nlohmann::json j = {{"type", "step"},
                      {"epoch", epoch + 1},
                      {"step", step_in_epoch + 1},
                      {"global_step", global_step + 1},
                      {"loss", mean_loss},
                      {"train_accuracy", train_accuracy},
                      {"lr", lr},
                      {"samples_per_second", rate},
                      {"step_ms", 1e3 * total / static_cast<double>(n)},
                      {"data_wait_ms", 1e3 * data / static_cast<double>(n)},
                      {"exposed_comm_ms", 1e3 * comm / static_cast<double>(n)},
                      {"allreduce_ms", 1e3 * allreduce / static_cast<double>(n)}};
  if (tokens_per_sample_ > 0) j["tokens_per_second"] = rate * static_cast<double>(tokens_per_sample_);
  if (peak_gflops_ > 0) j["mfu"] = mfu(rate);
  if (metrics_) metrics_->write(j.dump());
  for (const ResourceSample& r : sampler_->drain())
    if (metrics_) metrics_->write(resource_json(r, ctx_.world_rank(), global_step + 1).dump());
  window_begin_ = times_.size();
  window_loss_ = 0.0;
}

void RunReport::resources(Communicator& comm) {
  // One row per rank, filled by its owner and summed: a gather through the allreduce.
  constexpr std::size_t kFields = 13;
  const std::size_t world = static_cast<std::size_t>(ctx_.world_size());
  std::vector<double> rows(world * kFields, 0.0);
  const ResourceSummary mine = sampler_->summary();
  const double own[kFields] = {static_cast<double>(mine.samples),
                               mine.cpu_mean_percent,
                               mine.cpu_max_percent,
                               mine.rss_peak_mib,
                               mine.gpu ? 1.0 : 0.0,
                               mine.gpu_util_mean_percent,
                               mine.gpu_util_max_percent,
                               mine.gpu_mem_peak_mib,
                               mine.gpu_power_max_w,
                               mine.gpu_temp_max_c,
                               static_cast<double>(mine.gpu_throttle_reasons),
                               1e3 * median_of(times_, 0, [](const StepTimes& t) { return t.total(); }),
                               1e3 * median_of(times_, 0, [](const StepTimes& t) { return t.data + t.compute; })};
  std::copy(own, own + kFields, rows.begin() + static_cast<std::ptrdiff_t>(ctx_.world_rank() * kFields));
  comm.allreduce_sum(rows.data(), rows.size(), DType::f64);
  if (ctx_.world_rank() != 0 || !sampler_->enabled()) return;
  std::vector<double> busy;
  for (std::size_t r = 0; r < world; ++r) {
    const double* f = &rows[r * kFields];
    RankResources x;
    x.summary =
        ResourceSummary{static_cast<std::int64_t>(f[0]),  f[1], f[2], f[3], f[4] != 0.0, f[5], f[6], f[7], f[8], f[9],
                        static_cast<std::uint64_t>(f[10])};
    x.median_step_ms = f[11];
    x.median_busy_ms = f[12];
    busy.push_back(x.median_busy_ms);
    rank_resources_.push_back(x);
  }
  const double median_busy = median_value(busy);
  slow_ranks_ = slow_ranks(busy);
  log::info(
      "resources per rank (cpu: process CPU time / wall time, 100% = one core; busy: median data wait + "
      "compute per step):");
  for (std::size_t r = 0; r < world; ++r)
    log::info("{}", resource_line(r, rank_resources_[r], tc_.monitor_interval_ms));
  for (const int r : slow_ranks_)
    log::warn(
        "rank {} is slow: busy {:.2f} ms/step, {:.0f}% above the median over the ranks ({:.2f} ms); the others "
        "wait for it in every allreduce",
        r, busy[static_cast<std::size_t>(r)], 100.0 * (busy[static_cast<std::size_t>(r)] / median_busy - 1.0),
        median_busy);
  if (metrics_)
    metrics_->write(nlohmann::json{{"type", "resource_summary"}, {"ranks", ranks_json(rank_resources_)}}.dump());
}

void RunReport::overflow(std::int64_t global_step, double scale_before, double scale_after) {
  log::info("step {}: fp16 gradient overflow, update skipped, loss scale {:g} -> {:g}", global_step + 1, scale_before,
            scale_after);
}

void RunReport::epoch_end(std::int64_t epoch, std::int64_t epochs, std::int64_t global_step, double accuracy,
                          double loss) {
  best_accuracy_ = std::max(best_accuracy_, accuracy);
  last_test_loss_ = loss;
  if (accuracies_.empty()) first_epoch_ = epoch + 1;
  accuracies_.push_back(accuracy);
  if (tokens_per_sample_ > 0)  // a language model: as in evaluation()
    log::info("epoch {}/{}  val loss {:.4f}  next-token accuracy {:.4f}", epoch + 1, epochs, loss, accuracy);
  else
    log::info("epoch {}/{}  test accuracy {:.4f}  loss {:.4f}  (best {:.4f})", epoch + 1, epochs, accuracy, loss,
              best_accuracy_);
  nlohmann::json j = {{"type", "epoch"},           {"epoch", epoch + 1}, {"global_step", global_step},
                      {"test_accuracy", accuracy}, {"test_loss", loss},  {"best_test_accuracy", best_accuracy_}};
  if (tokens_per_sample_ > 0) j["val_loss"] = loss;
  if (metrics_) metrics_->write(j.dump());
}

void RunReport::evaluation(std::int64_t global_step, double accuracy, double loss) {
  last_test_loss_ = loss;
  // A language model's held-out text is its validation set (data convert --text writes val.h5);
  // its accuracy is the share of next tokens predicted.
  if (tokens_per_sample_ > 0)
    log::info("step {}  val loss {:.4f}  next-token accuracy {:.4f}", global_step, loss, accuracy);
  else
    log::info("step {}  test loss {:.4f}  accuracy {:.4f}", global_step, loss, accuracy);
  nlohmann::json j = {{"type", "eval"}, {"global_step", global_step}, {"test_accuracy", accuracy}, {"test_loss", loss}};
  if (tokens_per_sample_ > 0) j["val_loss"] = loss;
  if (metrics_) metrics_->write(j.dump());
}

void RunReport::sparsity(const std::vector<LayerSparsity>& layers, const PruneConfig& config) {
  sparsity_ = layers;
  prune_ = config;
  std::int64_t weights = 0, zeros = 0;
  std::string table = fmt::format("sparsity ({}{}, target {:.2f}):\n", config.structured ? "structured, " : "",
                                  config.scope == PruneScope::layer ? "per layer" : "global", config.sparsity);
  for (const LayerSparsity& l : layers) {
    weights += l.weights;
    zeros += l.zeros;
    table += fmt::format(
        "  [{}] {:<8} {:>10} weights {:>10} zeros {:6.2f}%{}\n", l.layer, l.kind, l.weights, l.zeros,
        100.0 * static_cast<double>(l.zeros) / static_cast<double>(std::max<std::int64_t>(l.weights, 1)),
        config.structured ? fmt::format("  ({} of {} neurons pruned)", l.neurons_pruned, l.neurons) : std::string());
  }
  table += fmt::format("  {:<12} {:>10} weights {:>10} zeros {:6.2f}%", "all", weights, zeros,
                       100.0 * static_cast<double>(zeros) / static_cast<double>(std::max<std::int64_t>(weights, 1)));
  log::info("{}", table);
}

void RunReport::memory(const MemoryReport& m) {
  memory_ = m;
  log::info("memory per rank (largest): {}", m.describe());
}

void RunReport::finish(std::int64_t steps, std::int64_t epochs, double final_loss, std::optional<double> final_accuracy,
                       bool finished, const Model& model, const GradScaler& scaler, const std::string& param_checksum) {
  double train_seconds = 0.0, data = 0.0, comm = 0.0;
  for (const auto& t : times_) {
    train_seconds += t.total();
    data += t.data;
    comm += t.comm;
  }
  const double rate = train_seconds > 0 ? static_cast<double>(steps * global_batch_) / train_seconds : 0.0;
  const auto flops = model.train_flops_per_sample();
  auto med = [&](auto f) { return 1e3 * median_of(times_, 0, f); };
  nlohmann::json j = {{"ringtrain_version", version()},
                      {"world_size", ctx_.world_size()},
                      {"nodes", ctx_.node_count()},
                      {"backend", device_name(ctx_.binding().backend)},
                      {"threads_per_rank", ctx_.binding().threads},
                      {"allreduce", comm_name_},
                      {"per_rank_batch", tc_.batch_size},
                      {"global_batch", global_batch_},
                      {"epochs", epochs},
                      {"steps", steps},  // run by this process; a resumed run started at start_step
                      {"start_step", start_step_},
                      {"final_step", start_step_ + steps},
                      {"finished", finished},
                      {"final_test_accuracy", final_accuracy ? nlohmann::json(*final_accuracy) : nlohmann::json()},
                      {"test_accuracy_per_epoch", accuracies_},  // this process's epochs, from first_epoch
                      {"first_epoch", accuracies_.empty() ? nlohmann::json() : nlohmann::json(first_epoch_)},
                      {"final_train_loss", final_loss},
                      {"train_samples_per_second", rate},
                      {"train_seconds", train_seconds},
                      {"median_step_ms", med([](const StepTimes& t) { return t.total(); })},
                      {"median_data_wait_ms", med([](const StepTimes& t) { return t.data; })},
                      {"median_exposed_comm_ms", med([](const StepTimes& t) { return t.comm; })},
                      {"median_allreduce_ms", med([](const StepTimes& t) { return t.allreduce; })},
                      {"overlap", overlap_},
                      {"cuda_graph_replays", graph_replays_},
                      {"data_strategy", read_strategy_name(tc_.data.strategy)},
                      {"prefetch", tc_.data.prefetch},
                      {"accumulation_steps", tc_.accumulation_steps},
                      {"data_wait_fraction", train_seconds > 0 ? data / train_seconds : 0.0},
                      {"comm_fraction", train_seconds > 0 ? comm / train_seconds : 0.0},
                      {"parameters", model.num_params()},
                      {"model_flops_per_sample", flops},
                      {"achieved_gflops", rate * static_cast<double>(flops) / 1e9},
                      {"precision", precision_name(tc_.precision)},
                      {"skipped_steps", scaler.skipped_steps()},  // over the whole run, also before a resume
                      {"loss_scale", scaler.scale()},
                      {"param_checksum", param_checksum}};
  if (memory_) {
    nlohmann::json memory;
    for (const auto& [name, bytes] : memory_->fields()) memory[std::string(name)] = bytes;
    j["memory"] = memory;
  }
  j["zero_stage"] = tc_.zero_stage;
  j["final_test_loss"] = last_test_loss_ ? nlohmann::json(*last_test_loss_) : nlohmann::json();
  j["peak_gflops_per_rank"] = peak_gflops_ > 0 ? nlohmann::json(peak_gflops_) : nlohmann::json();
  j["mfu"] = peak_gflops_ > 0 ? nlohmann::json(mfu(rate)) : nlohmann::json();
  if (tokens_per_sample_ > 0) {
    j["tokens_per_second"] = rate * static_cast<double>(tokens_per_sample_);
    j["val_loss"] = j["final_test_loss"];
  }
  if (!sparsity_.empty()) {
    nlohmann::json layers = nlohmann::json::array();
    std::int64_t weights = 0, zeros = 0;
    for (const LayerSparsity& l : sparsity_) {
      weights += l.weights;
      zeros += l.zeros;
      nlohmann::json e = {
          {"layer", l.layer},
          {"kind", l.kind},
          {"weights", l.weights},
          {"zeros", l.zeros},
          {"sparsity", static_cast<double>(l.zeros) / static_cast<double>(std::max<std::int64_t>(l.weights, 1))}};
      if (prune_.structured) {
        e["neurons"] = l.neurons;
        e["neurons_pruned"] = l.neurons_pruned;
      }
      layers.push_back(e);
    }
    j["sparsity"] = {{"target", prune_.sparsity},
                     {"scope", prune_.scope == PruneScope::layer ? "layer" : "global"},
                     {"structured", prune_.structured},
                     {"weights", weights},
                     {"zeros", zeros},
                     {"sparsity", static_cast<double>(zeros) / static_cast<double>(std::max<std::int64_t>(weights, 1))},
                     {"layers", layers}};
  }
  if (!rank_resources_.empty())
    j["resources"] = {
        {"interval_ms", tc_.monitor_interval_ms}, {"ranks", ranks_json(rank_resources_)}, {"slow_ranks", slow_ranks_}};
  if (ctx_.world_rank() == 0) write_file_atomic(tc_.run_dir + "/summary.json", j.dump(2) + "\n");
  // Job scripts take a finished run's summary path from the "done:" line.
  log::info(
      "{}: {}, {}{}, train {} ({} samples/s, {:.1f} GFLOP/s), final loss {:.4f}, {} -> {}/summary.json",
      finished ? "done" : "stopped early", count_of(epochs, "epoch"), count_of(steps, "step"),
      scaler.enabled() ? fmt::format(" ({} skipped for fp16 overflow over the run, loss scale {:g})",
                                     scaler.skipped_steps(), scaler.scale())
                       : std::string(),
      hms(train_seconds), with_commas(static_cast<std::int64_t>(rate)), rate * static_cast<double>(flops) / 1e9,
      final_loss,
      tokens_per_sample_ > 0
          ? fmt::format("val loss {}", last_test_loss_ ? fmt::format("{:.4f}", *last_test_loss_) : std::string("n/a"))
          : fmt::format("test accuracy {}",
                        final_accuracy ? fmt::format("{:.4f}", *final_accuracy) : std::string("n/a")),
      tc_.run_dir);
}

}  // namespace ringtrain
