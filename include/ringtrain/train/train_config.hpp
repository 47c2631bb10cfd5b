// TrainConfig: the typed, validated view of a run's TOML config (everything except the
// model and optimizer sections, which their builders read). Unknown keys are errors.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "ringtrain/data/data_config.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/data/token_loader.hpp"
#include "ringtrain/optim/grad_scaler.hpp"
#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain {

class Config;

// [checkpoint]: when and where checkpoints are written (also at the end of training and on
// SIGTERM/SIGUSR1 whenever enabled).
struct CheckpointConfig {
  bool enabled = true;
  std::string dir;               // default: <run.dir>/checkpoints
  std::int64_t every_steps = 0;  // 0: off
  double every_seconds = 0.0;    // 0: off
  std::int64_t keep = 3;         // newest files kept
  bool overwrite = false;        // a fresh start may delete another run's checkpoints in `dir`
  double timeout_s = 0.0;        // a save or resume taking longer ends the job (0: scaled by its bytes)
};

// comm.allreduce: how gradients are summed over the ranks.
enum class GradientAllreduce {
  automatic,  // "auto": NCCL where every rank of a world > 1 computes on a GPU and NCCL is built in, else the ring
  ring,       // ringtrain's ring over MPI point-to-point (host memory)
  mpi,        // MPI_Allreduce (host memory)
  nccl,       // NCCL on the GPUs (every rank on the cuda backend; otherwise the ring, with a warning)
};

struct TrainConfig {
  // [run]
  std::string run_dir;  // where metrics.jsonl, summary.json, config.toml go
  // [train]
  std::int64_t epochs = 1;
  std::int64_t max_steps = 0;    // stop after this many optimizer steps (0: no limit)
  std::int64_t batch_size = 64;  // per rank
  std::int64_t eval_batch_size = 256;
  std::int64_t eval_every = 0;    // steps between evaluations besides epoch ends (0: none)
  std::int64_t eval_batches = 0;  // batches per evaluation and rank (0: the whole shard)
  std::uint64_t seed = 0;
  std::int64_t log_every = 100;         // steps between progress lines
  std::int64_t accumulation_steps = 1;  // micro-batches (of batch_size) per optimizer step
  std::string resume = "none";          // "auto" (newest intact checkpoint), "none", or a checkpoint path
  std::int64_t exit_at_step = 0;        // end the run after this step with a checkpoint (0: never)
  DType precision = DType::f32;         // train.precision "fp32" | "bf16" | "fp16": the compute dtype
  bool cuda_graph = false;              // cuda: replay forward, loss and backward as one CUDA graph
  int zero_stage = 0;                   // ZeRO: 0 replicated, 1 sharded optimizer state, 2 + gradients, 3 + parameters
  // [loss_scale] (fp16 only; read and validated whenever present)
  LossScaleOptions loss_scale;
  CheckpointConfig checkpoint;
  // [data]
  DataConfig data;
  // [runtime]
  Device backend = Device::cpu;  // cuda falls back to cpu, with a warning, without a GPU
  std::int64_t threads = 0;      // 0: split the node's cores among local ranks
  bool tf32 = false;             // cuda, fp32: GEMMs and convolutions may use TF32 tensor cores
  // [comm]
  GradientAllreduce allreduce = GradientAllreduce::automatic;
  DType wire_dtype = DType::f32;  // gradients travel as f32 or bf16 (ring only)
  bool overlap = true;            // bucket allreduces during backward on a comm thread
  double bucket_mb = 1.0;         // unless given: kNcclBucketMb when the buckets go to NCCL
  bool bucket_mb_given = false;   // comm.bucket_mb set in the config
  double first_bucket_mb = 0.25;
  double timeout_s = 300.0;  // watchdog: a collective taking longer ends the job
  // [monitor]
  bool trace = false;                       // Chrome/Perfetto timeline in run.dir/trace.json
  std::int64_t monitor_interval_ms = 1000;  // resource sampling period (0: off)
  double peak_gflops = 0.0;                 // per rank, for MFU (0: measured on the CPU)
  bool phase_timing = false;                // GPU: wait for the device at each phase's end
};

// The train.precision spelling of a compute dtype: "fp32", "bf16", "fp16".
std::string_view precision_name(DType precision);
// comm.bucket_mb's default where the gradient buckets go to NCCL: NCCL reaches its bandwidth
// only with messages of tens of MB, and one launch per bucket costs microseconds on the GPU.
inline constexpr double kNcclBucketMb = 25.0;

// The comm.allreduce spelling: "auto", "ring", "mpi", "nccl".
std::string_view allreduce_name(GradientAllreduce allreduce);

// Reads and validates the keys above. `config_stem` names the default run directory.
TrainConfig read_train_config(Config& config, const std::string& config_stem);

// How a run's loaders are set up. Training: batch_size x accumulation_steps per rank,
// shuffled and augmented; evaluation: eval_batch_size, this rank's shard in order.
LoaderOptions loader_options(const TrainConfig& tc, int world_size, int rank, bool training);
// The same for token data (data.format = "tokens").
TokenLoaderOptions token_loader_options(const TrainConfig& tc, int world_size, int rank, bool training);

// data.augment_on resolved: true when the training batches are augmented and normalized on the
// GPU (raw loader batches). on_gpu: the run is bound to the cuda backend; train_samples: the
// element type of data.train. ConfigError naming the key when "gpu" cannot be honoured.
bool augment_on_gpu(const TrainConfig& tc, bool on_gpu, SampleType train_samples);

}  // namespace ringtrain
