// `ringtrain bench`: `gemm`, the machine's practical compute peak, OpenBLAS sgemm on every
// rank at once (ranks share cores and memory bandwidth, so the aggregate is what a
// data-parallel run can reach; one JSON line on rank 0), `allreduce` (bench_allreduce.cpp),
// `io` (bench_io.cpp), `ckpt` (bench_ckpt.cpp) and `prune` (bench_prune.cpp).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/commands.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/runtime/context.hpp"
#include "tensor/blas.hpp"

namespace ringtrain {
namespace {

struct GemmOptions {
  std::int64_t size = 1024;
  double seconds = 1.0;
  int threads = 0;
  int repeats = 3;
};

void bench_gemm(Context& ctx, const GemmOptions& o) {
  ctx.bind("cpu", o.threads);
  auto comm = make_mpi_communicator(ctx, AllreduceAlgo::mpi);
  const std::int64_t n = o.size;
  std::vector<float> a(static_cast<std::size_t>(n * n), 0.5f), b(a.size(), 0.25f), c(a.size(), 0.0f);
  using Clock = std::chrono::steady_clock;
  auto run = [&](std::int64_t iters) {
    const auto t0 = Clock::now();
    for (std::int64_t i = 0; i < iters; ++i)
      blas::sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  double once = run(1);  // warm-up, and the per-call time that sizes the timed loops
  comm->allreduce_sum(&once, 1, DType::f64);  // same iteration count on every rank
  const auto iters = std::max<std::int64_t>(1, static_cast<std::int64_t>(o.seconds / (once / ctx.world_size())));
  std::vector<double> rates;
  for (int r = 0; r < o.repeats; ++r) {
    comm->barrier();
    double gflops = 2.0 * static_cast<double>(n * n * n) * static_cast<double>(iters) / run(iters) / 1e9;
    comm->allreduce_sum(&gflops, 1, DType::f64);
    rates.push_back(gflops);
  }
  std::sort(rates.begin(), rates.end());
  const double median = rates[rates.size() / 2];
  nlohmann::json j = {{"bench", "gemm"},
                      {"size", n},
                      {"ranks", ctx.world_size()},
                      {"threads_per_rank", ctx.binding().threads},
                      {"iterations", iters},
                      {"gflops_aggregate", median},
                      {"gflops_per_rank", median / ctx.world_size()},
                      {"gflops_aggregate_runs", rates}};
  log::info("{}", j.dump());
}

}  // namespace

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

Command add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* gemm = bench->add_subcommand("gemm", "OpenBLAS sgemm GFLOP/s on all ranks at once (the compute peak)");
  auto o = std::make_shared<GemmOptions>();
  gemm->add_option("--size", o->size, "matrix size n (n x n x n)")->check(CLI::Range(64, 8192));
  gemm->add_option("--seconds", o->seconds, "time per measurement")->check(CLI::Range(0.05, 60.0));
  gemm->add_option("--threads", o->threads, "BLAS threads per rank (0: split the cores)")->check(CLI::Range(0, 1024));
  gemm->add_option("--repeats", o->repeats, "measurements (median reported)")->check(CLI::Range(1, 100));
  Command allreduce = add_bench_allreduce_command(*bench);
  Command io = add_bench_io_command(*bench);
  Command ckpt = add_bench_ckpt_command(*bench);
  Command prune = add_bench_prune_command(*bench);
  Command train = add_bench_train_command(*bench);
  return [gemm, o, allreduce, io, ckpt, prune, train](Context& ctx) {
    if (gemm->parsed()) bench_gemm(ctx, *o);
    allreduce(ctx);
    io(ctx);
    ckpt(ctx);
    prune(ctx);
    train(ctx);
    return 0;
  };
}

}  // namespace ringtrain
