// What every training-like command (train, bench train, tune batch) builds the same way from
// its config: the run's communicators under one watchdog, the data-parallel step options, the
// compute options of the model, and the start from rank 0's parameters (random or from a file).
#pragma once
#include <memory>
#include <string>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/watchdog.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/train/data_parallel_step.hpp"
#include "ringtrain/train/train_config.hpp"

namespace ringtrain {

class Context;

// `main` carries set-up, statistics and evaluation (always exact); `gradient` only the
// gradient buckets (comm.wire_dtype may compress them). The watchdog ends the job with a
// message naming the collective when one takes longer than comm.timeout_s; it is declared
// first so that it outlives the communicators it watches. Collective.
struct RunComms {
  std::unique_ptr<Watchdog> watchdog;
  std::unique_ptr<Communicator> main;
  std::unique_ptr<Communicator> gradient;
};
RunComms make_run_comms(const Context& ctx, const TrainConfig& tc);

// Where the gradient buckets go, comm.allreduce resolved for a job of `world` ranks of which
// `ranks_on_gpu` compute on a GPU: `auto` is NCCL only where it works and pays (several ranks, all
// on GPUs, NCCL built in), else the ring; `nccl` is NCCL where every rank is on a GPU (a build
// without NCCL then says so), else the ring; `ring` and `mpi` stay.
GradientAllreduce gradient_allreduce(GradientAllreduce requested, int ranks_on_gpu, int world, bool nccl_built);

// comm.overlap, buckets (comm.bucket_mb unless given: kNcclBucketMb where grad_comm is NCCL's),
// accumulation and train.cuda_graph from the config; gradients are
// reduced during backward only where the comm thread may run grad_comm's collectives next to
// the compute thread's MPI calls: MPI_THREAD_MULTIPLE, or a communicator that does not use MPI
// (NCCL).
StepOptions step_options(const TrainConfig& tc, const Context& ctx, const Communicator& grad_comm);

// Where and how the model computes: the bound device (cuda only when ctx is bound to a GPU),
// train.precision and runtime.tf32.
ComputeOptions compute_options(const TrainConfig& tc, const Context& ctx);

// Runs a collective of the main communicator (MPI: host memory) on a tensor that may live on
// the GPU, through a host copy that is copied back.
template <typename F>
void with_host_copy(Tensor& t, F&& collective) {
  Tensor host = to_host(t);
  collective(host);
  if (t.device() != Device::cpu) copy_into(t, host);
}

// Every rank starts from rank 0's parameters (a fresh start: rank 0 initialises them from
// the seed). Collective.
void start_from_root_params(Model& model, Communicator& comm, std::uint64_t seed);

// Every rank starts from the weights of a GPT's safetensors file (model.init_from), read by
// rank 0 and broadcast. Collective: a missing, malformed or mismatched file ends every rank with
// the same error naming model.init_from. model_config: the [model] table `model` was built from.
void start_from_file(const Context& ctx, Config& model_config, Model& model, Communicator& comm,
                     const std::string& path);

}  // namespace ringtrain
