// make_run_comms, step_options and the starts from rank 0's parameters (see header).
#include "ringtrain/train/run_comms.hpp"

#include <algorithm>
#include <fmt/ranges.h>

#include "cuda/gpu_backend.hpp"
#include "ringtrain/comm/nccl.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/printable.hpp"
#include "ringtrain/nn/gpt_safetensors.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

RunComms make_run_comms(const Context& ctx, const TrainConfig& tc) {
  RunComms c;
  c.watchdog = std::make_unique<Watchdog>(tc.timeout_s, [&ctx](const std::string& message) {
    log::write_line(stderr, fmt::format("ringtrain: error: [rank {}] {}", ctx.world_rank(), message));
    ctx.abort(1);
  });
  CommOptions options;
  options.algo = tc.allreduce == GradientAllreduce::mpi ? AllreduceAlgo::mpi : AllreduceAlgo::ring;
  c.main = watch_collectives(make_mpi_communicator(ctx, options), *c.watchdog, "main");
  options.wire_dtype = tc.wire_dtype;
  // NCCL only where every rank has a GPU (binding falls back per rank), so all ranks agree.
  std::int32_t gpus = ctx.binding().backend == Device::cuda ? 1 : 0;
  const bool may_use_nccl = tc.allreduce == GradientAllreduce::nccl || tc.allreduce == GradientAllreduce::automatic;
  if (may_use_nccl) c.main->allreduce_sum(&gpus, 1, DType::i32);
  const GradientAllreduce path = gradient_allreduce(tc.allreduce, gpus, ctx.world_size(), nccl_compiled());
  if (tc.allreduce == GradientAllreduce::nccl && path != GradientAllreduce::nccl && ctx.world_rank() == 0)
    log::warn("comm.allreduce=nccl needs every rank on the cuda backend ({} of {} are); gradients use the MPI ring",
              gpus, ctx.world_size());
  if (path == GradientAllreduce::nccl) {
    NcclOptions no;
    no.timeout_s = tc.timeout_s;
    c.gradient = watch_collectives(make_nccl_communicator(ctx, no), *c.watchdog, "gradient");
  } else {
    std::unique_ptr<Communicator> mpi = make_mpi_communicator(ctx, options);
    // A GPU rank reduces its device gradients through pinned host memory, bucket by bucket (a
    // world of one reduces nothing and needs no staging).
    if (ctx.binding().backend == Device::cuda && ctx.world_size() > 1)
      mpi = gpu("runtime.backend=cuda").stage_through_host(std::move(mpi));
    c.gradient = watch_collectives(std::move(mpi), *c.watchdog, "gradient");
  }
  return c;
}

GradientAllreduce gradient_allreduce(GradientAllreduce requested, int ranks_on_gpu, int world, bool nccl_built) {
  const bool all_on_gpu = ranks_on_gpu == world;
  switch (requested) {
    case GradientAllreduce::automatic:
      return all_on_gpu && world > 1 && nccl_built ? GradientAllreduce::nccl : GradientAllreduce::ring;
    case GradientAllreduce::nccl: return all_on_gpu ? GradientAllreduce::nccl : GradientAllreduce::ring;
    default: return requested;
  }
}

StepOptions step_options(const TrainConfig& tc, const Context& ctx, const Communicator& grad_comm) {
  StepOptions o;
  o.overlap = tc.overlap && (ctx.thread_multiple() || !grad_comm.calls_mpi());
  o.bucket_mb = tc.bucket_mb_given || grad_comm.calls_mpi() ? tc.bucket_mb : kNcclBucketMb;
  o.first_bucket_mb = tc.first_bucket_mb;
  o.accumulation_steps = tc.accumulation_steps;
  o.cuda_graph = tc.cuda_graph;
  o.zero_stage = tc.zero_stage;
  o.phase_timing = tc.phase_timing;
  return o;
}

ComputeOptions compute_options(const TrainConfig& tc, const Context& ctx) {
  return ComputeOptions{ctx.binding().backend, tc.precision, tc.tf32};
}

void start_from_root_params(Model& model, Communicator& comm, std::uint64_t seed) {
  if (comm.rank() == 0) model.init_params(seed);
  with_host_copy(model.params(), [&](Tensor& h) { comm.broadcast(h.raw(), h.nbytes(), 0); });
}

void start_from_file(const Context& ctx, Config& model_config, Model& model, Communicator& comm,
                     const std::string& path) {
  with_host_copy(model.params(), [&](Tensor& h) {
    run_collectively(ctx, [&] {
      if (comm.rank() != 0) return;
      std::vector<std::string> unused;
      try {
        unused = import_gpt_safetensors(path, model_config, model, h.f32());
      } catch (const Error& e) {
        throw ConfigError(fmt::format("model.init_from: {}", e.what()));
      }
      const std::size_t ignored = unused.size();
      constexpr std::size_t kNamed = 3;  // unused tensors named in the note, as printable text
      unused.resize(std::min(ignored, kNamed));
      for (std::string& name : unused) name = printable(name);
      log::info("init:   {} parameter tensors from {}{}", model.param_tensors().size(), path,
                ignored == 0 ? std::string()
                             : fmt::format("; {} other tensor{} ignored ({}{})", ignored, ignored == 1 ? "" : "s",
                                           fmt::join(unused, ", "), ignored > kNamed ? ", ..." : ""));
    });
    comm.broadcast(h.raw(), h.nbytes(), 0);
  });
}

}  // namespace ringtrain
