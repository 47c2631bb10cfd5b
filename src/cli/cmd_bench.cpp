// `ringtrain bench`: `gemm` (bench_gemm.cpp), `allreduce` (bench_allreduce.cpp), `io` (bench_io.cpp),
// `ckpt` (bench_ckpt.cpp), `prune` (bench_prune.cpp), `train` (bench_train.cpp) and `optim`
// (bench_optim.cpp).
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"

namespace ringtrain {

// `bench gemm`, in bench_gemm.cpp.
Command add_bench_gemm_command(CLI::App& bench);
// `bench allreduce`, in bench_allreduce.cpp.
Command add_bench_allreduce_command(CLI::App& bench);
// `bench io`, in bench_io.cpp.
Command add_bench_io_command(CLI::App& bench);
// `bench ckpt`, in bench_ckpt.cpp.
Command add_bench_ckpt_command(CLI::App& bench);
// `bench train`, in bench_train.cpp.
Command add_bench_train_command(CLI::App& bench);
// `bench prune`, in bench_prune.cpp.
Command add_bench_prune_command(CLI::App& bench);
// `bench optim`, in bench_optim.cpp.
Command add_bench_optim_command(CLI::App& bench);

Command add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  Command gemm = add_bench_gemm_command(*bench);
  Command allreduce = add_bench_allreduce_command(*bench);
  Command io = add_bench_io_command(*bench);
  Command ckpt = add_bench_ckpt_command(*bench);
  Command prune = add_bench_prune_command(*bench);
  Command train = add_bench_train_command(*bench);
  Command optim = add_bench_optim_command(*bench);
  return [gemm, allreduce, io, ckpt, prune, train, optim](Context& ctx) {
    gemm(ctx);
    allreduce(ctx);
    io(ctx);
    ckpt(ctx);
    prune(ctx);
    train(ctx);
    optim(ctx);
    return 0;
  };
}

}  // namespace ringtrain
