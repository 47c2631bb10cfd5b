// DataParallelStep: one synchronous data-parallel optimizer step on this rank's batch:
// forward and backward over `accumulation_steps` micro-batches, the gradient allreduce in
// buckets (launched during the last backward when overlapping), averaging folded into the
// optimizer update. The trainer runs it every step; tests run it with different world
// sizes, bucketings and accumulation. With a loss scaler (fp16) the loss gradient is scaled,
// 1/scale is folded into the same update, and a step with Inf/NaN gradients is skipped.
// ZeRO stage 1 (StepOptions::zero_stage): the buckets are reduce-scattered instead, each rank
// updates only its shard of every bucket (its optimizer holds state for that shard alone) and
// the updated parameters are allgathered: the same sums, hence bitwise the same parameters.
// Stage 2 also drops the gradient arena: backward writes each bucket into a staging buffer
// (ZeroGradients) and only the rank's shard of the reduced sums is kept. Stage 3 keeps only the
// rank's shard of the parameters as well (ZeroParameters): each bucket's layers are a group whose
// parameters are allgathered into a buffer just before forward and backward use them and let go
// after, so the updated shards need no allgather after the optimizer; the gathered values are
// the same, hence bitwise the same training again. The model's parameters must be set
// (initialised, broadcast, resumed) before a stage 3 step is made: from then on the arena holds
// only this rank's shard (readers of all of them go through parameter_shards()).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ringtrain/comm/grad_bucketer.hpp"
#include "ringtrain/data/augment.hpp"
#include "ringtrain/nn/layer.hpp"
#include "ringtrain/tensor/tensor.hpp"
#include "ringtrain/train/step_decision.hpp"

namespace ringtrain {

struct Batch;
class Communicator;
class DeviceBatch;
class DeviceStepStats;
class GradScaler;
class Model;
class Optimizer;
struct PlacedBatch;
class StepGraph;
class StepLoss;
class Tracer;
class ZeroGradients;
class ZeroParameters;

// data.augment_on = "gpu": raw uint8 batches are cropped, flipped and normalized on the GPU
// with the settings the loader's host decoder would have used (data.mean, data.std and
// data.augment.crop_padding; the flips and offsets come with each batch's draws).
struct GpuAugment {
  Normalization normalize;
  std::int64_t crop_padding = 0;
};

struct StepOptions {
  bool overlap = true;                  // allreduce buckets during backward on a comm thread
  double bucket_mb = 1.0;               // target bucket size
  double first_bucket_mb = 0.25;        // the first (last layers') bucket, smaller to start early
  std::int64_t accumulation_steps = 1;  // micro-batches per optimizer step
  // GPU: replay forward, loss and backward as one CUDA graph (then reduce the buckets after
  // backward, without overlap) when the model allows; see DataParallelStep::graph_refused().
  bool cuda_graph = false;
  std::optional<GpuAugment> gpu_augment;  // set: run(const Batch&) takes raw loader batches too
  // > 0: the averaged gradients are scaled down to this global L2 norm when above it (folded
  // into the update, computed on the reduced gradients: every rank clips alike).
  double clip_grad_norm = 0.0;
  // 0: every rank keeps the whole optimizer state; 1: each keeps its shard's (ZeRO stage 1);
  // 2: its shard of the reduced gradients too, the buckets staged during backward; 3: its shard of
  // the parameters too, each bucket's gathered around its uses (CPU only).
  int zero_stage = 0;
  // GPU: wait for the device at the end of forward, backward and the optimizer
  // (monitor.phase_timing); otherwise only the step's loss read waits, after every micro-batch's
  // backward is queued. No effect on the CPU.
  bool phase_timing = false;
};

struct StepResult {
  double loss = 0.0;          // mean over the global batch's labels (all ranks, micro-batches, positions)
  double correct = 0.0;       // correct predictions in the global batch (over all positions)
  double compute_s = 0.0;     // forward, backward, optimizer
  double forward_s = 0.0;     // of which: forward and loss (all micro-batches); as a CUDA
                              //           graph, forward, loss and backward
  double backward_s = 0.0;    //           backward (all micro-batches); as a graph, the
                              //           bucket launch
  double optimizer_s = 0.0;   //           the optimizer update, with the checks of the reduced gradients
                              //           (fp16 overflow, the clipping norm) before it
  double allreduce_s = 0.0;   // gradient buckets' allreduce (or reduce-scatter) time (overlapped or not)
  double allgather_s = 0.0;   // ZeRO 1, 2: the updated parameters' allgather (after the optimizer, exposed)
  double exposed_s = 0.0;     // end of backward until all buckets are reduced, + the statistics allreduce
                              // + ZeRO's parameter allgather
  bool skipped = false;       // fp16 overflow: the optimizer did not step
  double grad_norm = 0.0;     // with clipping: the averaged gradients' L2 norm before it
  double scale_before = 1.0;  // loss scale this step ran with
  double scale_after = 1.0;   // loss scale of the next step
};

// Bytes one rank holds for training, by what they are for (summary.json's "memory").
struct StepMemory {
  std::int64_t parameters = 0;           // the f32 master arena (+ the low-precision compute copy); stage 3: its shard
  std::int64_t gathered_parameters = 0;  // stage 3: the buffers of gathered groups (the most held at once)
  std::int64_t gradients = 0;            // the gradient arena or stage 2/3's reduced shard, tied weights' scratch
                                         // (+ the accumulation carry)
  std::int64_t optimizer_state = 0;      // momentum / moments: this rank's shard under ZeRO
  std::int64_t activations = 0;          // Model::activation_bytes at the largest batch run so far
  // Buffers a collective goes through, reused bucket by bucket (the ZeRO paper's "temporary
  // buffers", not model state): stage 2/3's gradient staging ring, the pinned host memory a GPU's
  // MPI gradient path stages buckets in.
  std::int64_t comm_buffers = 0;
};

// Labels per sample of a model: its output's positions (every dimension but the last, the classes).
std::int64_t label_positions(const Model& model);

// The gradient buckets a DataParallelStep with `options` plans for `model`, in launch order.
std::vector<Bucket> plan_step_buckets(const Model& model, const StepOptions& options);
// The arena ranges rank `rank` of `world` updates and keeps optimizer state for: under ZeRO its
// shard of every bucket (bucket_shards), else the whole arena. The optimizer handed to the
// step must be made for exactly these (build_optimizer's `owned`). Throws ConfigError for a
// train.zero_stage out of range or not available on the model's device (3 on a GPU).
std::vector<ArenaRange> step_owned_ranges(const Model& model, const StepOptions& options, int world, int rank);

class DataParallelStep {
 public:
  // stats_comm carries the loss/accuracy; grad_comm is used only for gradient buckets (on
  // the comm thread when overlapping). micro_batch: samples per micro-batch per rank. The loss
  // is softmax cross-entropy over the last dimension of the model's output, at every position
  // of the others: one label per position ([K]: one per sample; [T, V]: T per sample).
  // scaler: null or disabled for no loss scaling (its state lives with the caller, which
  // checkpoints it); the model's compute dtype is set by the caller too.
  DataParallelStep(Model& model, Optimizer& optimizer, Communicator& stats_comm, Communicator& grad_comm,
                   std::int64_t micro_batch, const StepOptions& options, Tracer* tracer, GradScaler* scaler = nullptr);
  ~DataParallelStep();

  // x: [micro_batch * accumulation_steps, ...] this rank's inputs (in the model's input_dtype());
  // labels: one per sample and output position (label_positions(model) per sample).
  // Throws CollectiveError (on every rank at once) when the global loss is not finite; the
  // update is then skipped. With an enabled scaler a non-finite loss or gradient is an
  // overflow instead: the step is skipped (StepResult::skipped) and training goes on.
  StepResult run(const Tensor& x, const std::int32_t* labels, const StepInfo& info, float lr);
  // The same for a loader batch: decoded (Batch::x), or raw (LoaderOptions::raw) when made
  // with StepOptions::gpu_augment, augmented and normalized on the GPU as it is placed.
  StepResult run(const Batch& batch, const StepInfo& info, float lr);
  // The next step's batch staged while this one runs, so that its copy to the GPU overlaps the
  // step: `upcoming` is called in each run() once the step's work is queued, before the host
  // waits for the device, and may hand the next batch to stage_next(); the next run() with that
  // batch (the same host buffer) then only places it. Null: nothing is staged ahead.
  void set_upcoming(std::function<void()> upcoming) { upcoming_ = std::move(upcoming); }
  void stage_next(const Tensor& x, const std::int32_t* labels);
  void stage_next(const Batch& batch);
  std::size_t num_buckets() const;
  StepMemory memory() const;
  bool overlapped() const;  // whether buckets are reduced during backward
  // Stage 3: the rank's parameter shards and the gathers of the rest (for readers of every
  // parameter between steps: checksums, pruning masks); null at other stages.
  ZeroParameters* parameter_shards() const { return zero_params_.get(); }
  // With StepOptions::cuda_graph: whether the step runs as a CUDA graph (false once a capture
  // failed), and why it cannot ("" when it can: the model is on a GPU and there is one
  // micro-batch per step).
  bool graphed() const;
  std::uint64_t graph_replays() const;  // steps run as a graph launch so far
  const std::string& graph_refused() const { return graph_refused_; }

 private:
  using Clock = std::chrono::steady_clock;
  // The step on the batch `place` puts where the model computes (its time counts as compute).
  StepResult run_placed(const std::function<PlacedBatch()>& place, const StepInfo& info, float lr);
  // The batch at `host` where the model computes: placed as staged by stage_next, or staged now.
  PlacedBatch place(const void* host, const std::function<void()>& stage);
  // Calls upcoming_ (its error comes after `then`, which must run: the step's collectives).
  template <typename Then>
  void with_upcoming(Then&& then);
  // After the micro-batches' backward, one of: the host gathers the statistics, decides and
  // steps the optimizer, waiting where each needs it (the CPU; a GPU with ZeRO or
  // monitor.phase_timing); or the device does (device_stats_) and the host waits once, after
  // the optimizer is queued, then settles the same decision from the same statistics.
  StepResult finish_on_host(StepResult r, const StepInfo& info, float lr, Clock::time_point start,
                            Clock::time_point backward_end);
  StepResult finish_on_device(StepResult r, const StepInfo& info, float lr, Clock::time_point start,
                              Clock::time_point backward_end);
  // decide_step on the ranks' summed statistics (ringtrain/train/step_decision.hpp), which are
  // averaged over world_k() = ranks x micro-batches.
  StepDecision decide(const std::vector<double>& stats, double loss_scale) const;
  double world_k() const;
  // Into r: the loss, accuracy and gradient norm; the loss scaler's update (r.skipped) or, without
  // one, CollectiveError on a non-finite loss.
  void settle(const StepDecision& d, const std::vector<double>& stats, const StepInfo& info, StepResult& r);
  void trace(const char* name, Clock::time_point begin, Clock::time_point end) const;
  // Sums of the reduced gradients over the ranges this rank checks (its shard under ZeRO):
  // [0] whether any is not finite, [1 + r] rank r's shard's sum of squares (clipping). Filled
  // into `stats` after the loss sums, which one allreduce then completes.
  void gradient_checks(double* stats) const;
  void wait_for_phase() const;  // monitor.phase_timing: the device finishes what is queued
  // ZeRO: every rank's updated shard of the parameters to every rank.
  void allgather_params();
  // Backward of micro-batch micro_index_; after the last one, every bucket is launched.
  void backward_and_reduce(bool last);
  // GPU, without overlap: adds the carry, stages the host copy (MPI) and launches every bucket.
  void reduce_after_backward();
  // The model's forward and the loss (and its gradient, times loss_scale) of one micro-batch.
  void forward_and_loss(const Tensor& x, const std::int32_t* labels, const StepInfo& info, float loss_scale);

  Model& model_;
  Optimizer& optimizer_;
  Communicator& stats_comm_;
  Communicator& grad_comm_;  // the buckets' (on the comm thread while it runs them), and the allgather's
  StepOptions options_;
  std::int64_t micro_batch_;
  std::int64_t positions_;  // labels per sample
  Tracer* tracer_;
  GradScaler* scaler_;
  std::unique_ptr<StepLoss> loss_;
  std::unique_ptr<DeviceStepStats> device_stats_;  // a GPU step decided on the device (finish_on_device)
  std::unique_ptr<DeviceBatch> placer_;            // puts the host batch where the model computes
  std::function<void()> upcoming_;                 // set_upcoming
  const void* staged_next_ = nullptr;              // the host buffer of the batch stage_next staged
  std::unique_ptr<StepGraph> graph_;               // null unless the step runs as a CUDA graph
  std::string graph_refused_;
  Tensor dlogits_;
  Tensor carry_;  // gradients summed over the earlier micro-batches (accumulation only)
  std::int64_t micro_index_ = 0;
  std::vector<Bucket> buckets_;
  // Per rank: the arena ranges of its shard (every rank's, for the clipping norm's sum).
  std::vector<std::vector<ArenaRange>> shards_;
  std::unique_ptr<ZeroGradients> zero_grads_;  // stage 2: the staged and sharded gradients
  // Stage 3 (gathers on bucketer_'s comm thread). Declared first so that it goes last: the
  // bucketer's thread is joined before the buffers a running gather writes are freed.
  std::unique_ptr<ZeroParameters> zero_params_;
  std::unique_ptr<GradBucketer> bucketer_;
};

}  // namespace ringtrain
