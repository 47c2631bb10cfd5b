// Private: what a run tells its user and leaves on disk. Rank 0 prints the header, progress
// lines and epoch results, and writes metrics.jsonl and summary.json; timings are this
// rank's (all ranks step in lockstep through the allreduce).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ringtrain/monitor/metrics_log.hpp"
#include "ringtrain/monitor/resource_sampler.hpp"
#include "ringtrain/prune/pruner.hpp"
#include "ringtrain/train/memory_report.hpp"

namespace ringtrain {

class Communicator;
class Context;
class GradScaler;
class Model;
struct Session;
struct TrainConfig;

struct StepTimes {
  double data = 0.0;       // waiting for the next batch (all of its assembly when data.prefetch = 0)
  double compute = 0.0;    // forward, backward, optimizer
  double comm = 0.0;       // exposed communication: end of backward until gradients are reduced
  double allreduce = 0.0;  // all buckets' allreduce time, overlapped with backward or not
  double total() const { return data + compute + comm; }
};

// One rank's line of the end-of-run resource summary.
struct RankResources {
  ResourceSummary summary;
  double median_step_ms = 0.0;
  double median_busy_ms = 0.0;  // data wait + compute: a step's time not spent waiting for peers
};

class RunReport {
 public:
  // start_step > 0 (resumed from a checkpoint): metrics.jsonl is continued, not started afresh.
  RunReport(const Context& ctx, const TrainConfig& tc, std::string_view comm_name, std::int64_t start_step);
  // The run's data and model as the session opened them.
  void header(const Session& session, std::int64_t global_batch);
  // Set-up is over (every buffer of the step and the evaluation made): how long it took.
  void setup_done(double seconds) const;
  void comm_plan(std::size_t buckets, bool overlap);
  // train.cuda_graph: whether the step runs as a CUDA graph, or why not.
  void cuda_graph(bool graphed, const std::string& refused);
  void graph_replays(std::uint64_t n) { graph_replays_ = n; }  // for summary.json, before finish()
  // What one rank held (summary.json's "memory"), before finish(); logged by rank 0.
  void memory(const MemoryReport& m);
  // Collective, at the end of training: every rank's resource summary and median step times
  // go to rank 0, which prints one line per rank, warns about a slow rank and keeps them for
  // summary.json. (metrics.jsonl gets rank 0's own samples at each log point.)
  void resources(Communicator& comm);
  void step(std::int64_t epoch, std::int64_t step_in_epoch, std::int64_t global_step, double loss,
            double train_accuracy, double lr, const StepTimes& times, std::int64_t total_steps);
  // fp16: the step's gradients overflowed and its update was skipped.
  void overflow(std::int64_t global_step, double scale_before, double scale_after);
  void epoch_end(std::int64_t epoch, std::int64_t epochs, std::int64_t global_step, double accuracy, double loss);
  // An evaluation between epoch ends (train.eval_every).
  void evaluation(std::int64_t global_step, double accuracy, double loss);
  // One rank's peak GFLOP/s (0: unknown): progress lines, metrics.jsonl and summary.json then give
  // the model FLOP utilization (training FLOPs per sample x samples/s over the ranks' peak).
  void peak(double gflops_per_rank, std::string_view source);
  // Prints the per-layer sparsity table (pruned runs) and keeps it for summary.json.
  void sparsity(const std::vector<LayerSparsity>& layers, const PruneConfig& config);
  // final_accuracy: none without a test set (null in summary.json). finished: false for a run
  // that stopped before its last step (a signal, train.exit_at_step); it writes summary.json too.
  void finish(std::int64_t steps, std::int64_t epochs, double final_loss, std::optional<double> final_accuracy,
              bool finished, const Model& model, const GradScaler& scaler, const std::string& param_checksum);

 private:
  const Context& ctx_;
  const TrainConfig& tc_;
  std::string comm_name_;
  std::optional<MetricsLog> metrics_;          // rank 0 only
  std::unique_ptr<ResourceSampler> sampler_;   // monitor.interval_ms
  std::vector<RankResources> rank_resources_;  // rank 0, after resources()
  std::vector<int> slow_ranks_;
  std::int64_t start_step_ = 0;
  std::int64_t steps_per_epoch_ = 0;
  std::int64_t global_batch_ = 0;
  std::int64_t tokens_per_sample_ = 0;  // token data: block_size (rates are also given in tokens/s)
  std::int64_t flops_per_sample_ = 0;   // training FLOPs per sample
  double peak_gflops_ = 0.0;            // per rank; 0: MFU not reported
  std::string peak_source_;             // where peak_gflops_ came from (RunReport::peak)
  bool warned_mfu_over_one_ = false;    // an MFU above 100% was reported and explained
  // The MFU of a progress line; warns once (rank 0) when it exceeds 100%: the peak was too low.
  double checked_mfu(double samples_per_second);
  double mfu(double samples_per_second) const;
  std::vector<StepTimes> times_;  // every step, for medians and the train time
  std::size_t window_begin_ = 0;
  double window_loss_ = 0.0;
  double best_accuracy_ = -1.0;
  std::optional<double> last_test_loss_;
  std::uint64_t graph_replays_ = 0;  // steps run as a CUDA graph launch
  std::optional<MemoryReport> memory_;
  bool overlap_ = false;  // as in effect (comm.overlap may be refused by MPI's thread level)
  std::vector<double> accuracies_;
  std::int64_t first_epoch_ = 0;         // the epoch (from 1) of accuracies_[0]; summary.json: null before the first
  std::vector<LayerSparsity> sparsity_;  // empty unless pruned
  PruneConfig prune_;
};

std::string with_commas(std::int64_t v);
std::string hms(double seconds);                              // 0:01:05
std::string count_of(std::int64_t n, std::string_view noun);  // "1 rank", "2 ranks"

// The median; of an even count, the mean of the two middle values (0 for none).
double median_value(std::vector<double> v);
// The ranks whose median busy time per step exceeds the median over all ranks by 25%; with
// two ranks the slower is measured against the mean of both. None with one rank.
std::vector<int> slow_ranks(const std::vector<double>& busy_ms);
// One rank's line of the end-of-run resource summary; "no samples" when the run was shorter
// than monitor.interval_ms (CPU utilization unmeasured, not 0%).
std::string resource_line(std::size_t rank, const RankResources& x, std::int64_t interval_ms);

}  // namespace ringtrain
