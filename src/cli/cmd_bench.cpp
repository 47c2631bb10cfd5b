// `ringtrain bench`: the command line of each benchmark, parsed into its options; the
// benchmarks themselves are in src/bench (ringtrain/bench/bench.hpp).
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/number_checks.hpp"
#include "ringtrain/bench/bench.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/data/dataset.hpp"
#include "ringtrain/runtime/collective.hpp"

namespace ringtrain {
namespace {

// --backend into *backend, with runtime.backend's names (cpu, cuda).
void add_backend_option(CLI::App* cmd, Device* backend, const std::string& help) {
  cmd->add_option_function<std::string>(
         "--backend", [backend](const std::string& name) { *backend = name == "cuda" ? Device::cuda : Device::cpu; },
         help)
      ->check(CLI::IsMember({device_name(Device::cpu), device_name(Device::cuda)}));
}

// The action of a benchmark's subcommand: the benchmark, with its options, when it was chosen.
template <typename Options>
Command when_chosen(const CLI::App* cmd, const std::shared_ptr<Options>& o, void (*bench)(Context&, const Options&)) {
  return [cmd, o, bench](Context& ctx) {
    if (cmd->parsed()) bench(ctx, *o);
    return 0;
  };
}

Command add_bench_gemm_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "gemm",
      "GEMM throughput: sgemm GFLOP/s on all ranks at once (cpu, the compute peak; oneDNN's or OpenBLAS's, as "
      "training runs it), or cuBLASLt "
      "TFLOP/s of ringtrain's algorithm against cuBLASLt's fastest (cuda)");
  auto o = std::make_shared<GemmBenchOptions>();
  add_backend_option(cmd, &o->backend,
                     "cpu (oneDNN or OpenBLAS) or cuda (cuBLASLt, 1 rank; without a GPU: cpu, with a warning)");
  cmd->add_option("--size", o->size, "matrix size n (n x n x n; cuda also times the training shapes and 8192)")
      ->check(number_in(64, 8192));
  cmd->add_option("--seconds", o->seconds, "time per measurement (cpu)")->check(number_in(0.05, 60.0));
  cmd->add_option("--threads", o->threads, "compute threads per rank (cpu; 0: split the cores)")
      ->check(number_in(0, 1024));
  cmd->add_option("--repeats", o->repeats, "measurements (median reported)")->check(number_in(1, 100));
  cmd->add_option("--dtype", o->dtypes,
                  "input types (cuda; repeatable or comma list of f32, tf32, bf16, f16; default f32,tf32,bf16)")
      ->delimiter(',')
      ->check(CLI::IsMember({"f32", "tf32", "bf16", "f16"}));
  cmd->add_option("--calls", o->calls, "GEMM calls per timed measurement (cuda)")->check(number_in(1, 10000));
  cmd->add_flag("--json", o->json,
                "one JSON line per GEMM and type instead of a table (cuda; cpu always prints its JSON line)");
  return [cmd, o](Context& ctx) {
    if (!cmd->parsed()) return 0;
    const bool cuda = o->backend == Device::cuda;
    run_collectively(ctx, [&] {
      for (const char* option :
           cuda ? std::vector<const char*>{"--seconds", "--threads"} : std::vector<const char*>{"--dtype", "--calls"})
        RT_REQUIRE(cmd->count(option) == 0, ConfigError, "bench gemm: {} applies to --backend {} only", option,
                   cuda ? "cpu" : "cuda");
    });
    bench_gemm(ctx, *o);
    return 0;
  };
}

Command add_bench_allreduce_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("allreduce", "allreduce time, algbw and busbw per message size and backend");
  auto o = std::make_shared<AllreduceBenchOptions>();
  cmd->add_option("--min-bytes", o->min_bytes, "smallest message")
      ->check(number_in(std::size_t{1}, std::size_t{1} << 40));
  cmd->add_option("--max-bytes", o->max_bytes, "largest message (the buffer's size)")
      ->check(number_in(std::size_t{1}, std::size_t{1} << 40));
  cmd->add_option("--factor", o->factor, "size step factor")->check(number_in(std::size_t{2}, std::size_t{1024}));
  cmd->add_option("--iters", o->iters, "timed calls per size (median reported)")->check(number_in(1, 100000));
  cmd->add_option("--warmup", o->warmup, "untimed calls per size first")->check(number_in(0, 100000));
  cmd->add_option("--backends", o->backends,
                  "comma-separated backends: ring (ringtrain's ring, through shared memory when every rank is on one "
                  "node), ring-p2p (the ring over MPI messages even within a node), mpi (MPI_Allreduce)")
      ->delimiter(',')
      ->check(CLI::IsMember(allreduce_bench_backends()));
  cmd->add_option("--dtype", o->dtype, "element type")->check(CLI::IsMember(allreduce_bench_dtypes()));
  cmd->add_option("--wire-dtype", o->wire_dtype, "what f32 data travels as (bf16: ring backends only)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--load-threads", o->load_threads,
                  "threads per rank that compute during the measurement (a busy neighbour on the same cores)")
      ->check(number_in(0, 1024));
  cmd->add_flag("--json", o->json, "one JSON object per line instead of tables");
  return when_chosen(cmd, o, bench_allreduce);
}

Command add_bench_io_command(CLI::App& bench) {
  auto* io = bench.add_subcommand("io", "Loader throughput over one pass vs raw pread bandwidth of the same files");
  auto o = std::make_shared<IoBenchOptions>();
  io->add_option("dataset", o->sources, "HDF5 files or glob patterns")->required();
  io->add_option("--strategy", o->strategy, "how the loader reads")->check(CLI::IsMember(read_strategy_names()));
  io->add_option("--images-key", o->images_key, "sample dataset name");
  io->add_option("--labels-key", o->labels_key, "label dataset name");
  io->add_option("--batch", o->batch, "samples per rank and batch")->check(number_in(1, 1 << 20));
  io->add_option("--prefetch", o->prefetch, "batches prepared ahead (0: synchronous)")->check(number_in(0, 1024));
  io->add_option("--shuffle-window", o->shuffle_window, "stream: samples shuffled together")
      ->check(number_at_least(std::int64_t{1}));
  io->add_option("--read-ahead", o->read_ahead, "stream: windows read ahead")->check(number_at_least(std::int64_t{1}));
  io->add_option("--repeats", o->repeats, "measurements (median reported)")->check(number_in(1, 100));
  io->add_option("--order-out", o->order_out, "write each rank's sample order to PREFIX.rankR.i64 (int64)");
  return when_chosen(io, o, bench_io);
}

Command add_bench_ckpt_command(CLI::App& bench) {
  auto* cmd =
      bench.add_subcommand("ckpt", "Checkpoint write/read MB/s vs raw I/O of the same bytes, reads from storage");
  auto o = std::make_shared<CkptBenchOptions>();
  cmd->add_option("--params", o->params, "model size in float parameters")->check(number_in(1LL, 1LL << 34));
  cmd->add_option("--dir", o->dir, "directory on the file system to measure (files are removed afterwards)");
  cmd->add_option("--repeats", o->repeats, "measurements (median reported)")->check(number_in(1, 100));
  return when_chosen(cmd, o, bench_ckpt);
}

Command add_bench_prune_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "prune", "Forward+backward time of an MLP vs the same MLP with a fraction of its hidden neurons removed");
  auto o = std::make_shared<PruneBenchOptions>();
  cmd->add_option("config,--config", o->config, "a config whose [[model.layers]] form an MLP")
      ->check(CLI::ExistingFile);
  cmd->add_option("--input", o->input, "per-sample input shape")->delimiter(',');
  cmd->add_option("--fraction", o->fraction, "share of each hidden layer's neurons removed")
      ->check(number_in(0.0, 0.99));
  cmd->add_option("--batch", o->batch, "samples per step")->check(number_in(1, 65536));
  cmd->add_option("--iterations", o->iterations, "steps per measurement")->check(number_in(1, 100000));
  cmd->add_option("--repeats", o->repeats, "measurements of each model (median reported)")->check(number_in(1, 100));
  cmd->add_option("--threads", o->threads, "compute threads per rank (0: split the cores)")->check(number_in(0, 1024));
  return when_chosen(cmd, o, bench_prune);
}

Command add_bench_train_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("train", "Timed training steps of a config: samples/s and step-time breakdown");
  auto o = std::make_shared<TrainBenchOptions>();
  cmd->add_option("config", o->config, "run configuration (TOML)")->required();
  add_config_overrides(*cmd, o->overrides);
  cmd->add_flag("--synthetic", o->synthetic, "random inputs of the dataset's sample shape (no I/O timed)");
  cmd->add_flag("--layers", o->layers,
                "each layer's forward and backward time and GFLOP/s (rank 0's medians; cpu backend)");
  cmd->add_option("--warmup", o->warmup, "untimed steps first")->check(number_in(0, 100000));
  cmd->add_option("--steps", o->steps, "timed steps (medians reported)")->check(number_in(1, 1000000));
  cmd->add_flag("--json", o->json, "one JSON object instead of text");
  return when_chosen(cmd, o, bench_train);
}

Command add_bench_optim_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "optim", "Fused optimizer update (AdamW, SGD momentum) vs its memory bound and a plain copy: GB/s on CPU or GPU");
  auto o = std::make_shared<OptimBenchOptions>();
  add_backend_option(cmd, &o->backend,
                     "where the arenas live (as runtime.backend; cuda without a GPU: cpu, with a warning)");
  cmd->add_option("--params", o->params, "parameters in the arena")
      ->check(number_in(std::int64_t{1}, std::int64_t{1} << 34));
  cmd->add_option("--iterations", o->iterations, "calls per measurement")->check(number_in(1, 100000));
  cmd->add_option("--repeats", o->repeats, "measurements of each pass (median reported)")->check(number_in(1, 100));
  cmd->add_flag("--json", o->json, "one JSON object instead of text");
  return when_chosen(cmd, o, bench_optim);
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  const std::vector<Command> commands = {add_bench_gemm_command(*bench),  add_bench_allreduce_command(*bench),
                                         add_bench_io_command(*bench),    add_bench_ckpt_command(*bench),
                                         add_bench_prune_command(*bench), add_bench_train_command(*bench),
                                         add_bench_optim_command(*bench)};
  return [commands](Context& ctx) {
    for (const Command& command : commands) command(ctx);
    return 0;
  };
}

}  // namespace ringtrain
