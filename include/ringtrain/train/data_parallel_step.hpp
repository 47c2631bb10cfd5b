// DataParallelStep: one synchronous data-parallel optimizer step on this rank's batch:
// forward and backward over `accumulation_steps` micro-batches, the gradient allreduce in
// buckets (launched during the last backward when overlapping), averaging folded into the
// optimizer update. The trainer runs it every step; tests run it with different world
// sizes, bucketings and accumulation. With a loss scaler (fp16) the loss gradient is scaled,
// 1/scale is folded into the same update, and a step with Inf/NaN gradients is skipped.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ringtrain/data/augment.hpp"
#include "ringtrain/nn/layer.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

struct Batch;
class Communicator;
class DeviceBatch;
class GradBucketer;
class GradScaler;
class Model;
class Optimizer;
struct PlacedBatch;
class StepGraph;
class StepLoss;
class Tracer;

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
};

struct StepResult {
  double loss = 0.0;          // mean over the global batch's labels (all ranks, micro-batches, positions)
  double correct = 0.0;       // correct predictions in the global batch (over all positions)
  double compute_s = 0.0;     // forward, backward, optimizer
  double forward_s = 0.0;     // of which: forward and loss (all micro-batches); as a CUDA
                              //           graph, forward, loss and backward
  double backward_s = 0.0;    //           backward (all micro-batches); as a graph, the
                              //           bucket launch
  double optimizer_s = 0.0;   //           the optimizer update
  double allreduce_s = 0.0;   // gradient buckets' allreduce time (overlapped or not)
  double exposed_s = 0.0;     // end of backward until all buckets are reduced, + statistics
  bool skipped = false;       // fp16 overflow: the optimizer did not step
  double grad_norm = 0.0;     // with clipping: the averaged gradients' L2 norm before it
  double scale_before = 1.0;  // loss scale this step ran with
  double scale_after = 1.0;   // loss scale of the next step
};

// Labels per sample of a model: its output's positions (every dimension but the last, the classes).
std::int64_t label_positions(const Model& model);

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
  std::size_t num_buckets() const;
  bool overlapped() const;  // whether buckets are reduced during backward
  // With StepOptions::cuda_graph: whether the step runs as a CUDA graph (false once a capture
  // failed), and why it cannot ("" when it can: the model is on a GPU and there is one
  // micro-batch per step).
  bool graphed() const;
  std::uint64_t graph_replays() const;  // steps run as a graph launch so far
  const std::string& graph_refused() const { return graph_refused_; }

 private:
  // The step on the batch `place` puts where the model computes (its time counts as compute).
  StepResult run_placed(const std::function<PlacedBatch()>& place, const StepInfo& info, float lr);
  // Backward of micro-batch micro_index_; after the last one, every bucket is launched.
  void backward_and_reduce(bool last);
  // GPU, without overlap: adds the carry, stages the host copy (MPI) and launches every bucket.
  void reduce_after_backward();
  // The model's forward and the loss (and its gradient, times loss_scale) of one micro-batch.
  void forward_and_loss(const Tensor& x, const std::int32_t* labels, const StepInfo& info, float loss_scale);

  Model& model_;
  Optimizer& optimizer_;
  Communicator& stats_comm_;
  StepOptions options_;
  std::int64_t micro_batch_;
  std::int64_t positions_;  // labels per sample
  Tracer* tracer_;
  GradScaler* scaler_;
  std::unique_ptr<StepLoss> loss_;
  std::unique_ptr<DeviceBatch> placer_;  // puts the host batch where the model computes
  std::unique_ptr<StepGraph> graph_;     // null unless the step runs as a CUDA graph
  std::string graph_refused_;
  Tensor dlogits_;
  Tensor carry_;       // gradients summed over the earlier micro-batches (accumulation only)
  Tensor host_grads_;  // GPU with an MPI communicator: the host copy the buckets reduce
  std::int64_t micro_index_ = 0;
  std::unique_ptr<GradBucketer> bucketer_;
};

}  // namespace ringtrain
