// `ringtrain bench gemm`: sgemm (oneDNN's or OpenBLAS's, as training runs it: blas.hpp) on every
// rank at once (cpu, the default: the compute peak, one JSON line on rank 0), or on one GPU the Fashion-MNIST Linear
// GEMMs and two squares, ringtrain's cuBLASLt algorithm against cuBLASLt's fastest (cuda; bench_gemm_cuda.cpp).
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_gemm_cuda.hpp"
#include "bench/bench_stats.hpp"
#include "cuda/gpu_backend.hpp"
#include "ringtrain/bench/bench.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"
#include "ringtrain/train/peak_flops.hpp"

namespace ringtrain {
namespace {

// Ranks share cores and memory bandwidth, so the aggregate is what a data-parallel run can reach.
void bench_gemm_cpu(Context& ctx, const GemmBenchOptions& o) {
  auto comm = make_mpi_communicator(ctx, AllreduceAlgo::mpi);
  const std::int64_t n = o.size;
  const SgemmPeak peak = measure_sgemm_peak(*comm, ctx.world_size(), n, o.seconds, o.repeats);
  const std::vector<double>& rates = peak.aggregate;
  const std::int64_t iters = peak.iterations;
  const double aggregate = median(rates);
  nlohmann::json j = {{"bench", "gemm"},
                      {"backend", "cpu"},
                      {"size", n},
                      {"ranks", ctx.world_size()},
                      {"threads_per_rank", ctx.binding().threads},
                      {"library", peak.library},
                      {"iterations", iters},
                      {"gflops_aggregate", aggregate},
                      {"gflops_per_rank", aggregate / ctx.world_size()},
                      {"gflops_aggregate_runs", rates}};
  log::info("{}", j.dump());
}

// One GEMM of the CUDA bench: row-major C[m,n] = op(A) op(B); c_f32: C is f32 whatever the
// inputs (the weight gradient), else of the inputs' type.
struct NamedGemm {
  std::string name;
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  bool c_f32 = false;
};

// The GEMMs of a Linear layer in -> out at batch n as CudaLinear runs them (nn/cuda/cuda_linear.cpp):
// y = x W^T, dW = dy^T x (into f32), and dx = dy W unless the layer is the model's first trainable one.
void add_linear(std::vector<NamedGemm>& out, const std::string& name, std::int64_t n, std::int64_t in,
                std::int64_t features, bool with_dx) {
  out.push_back({name + ".forward", false, true, n, features, in, false});
  out.push_back({name + ".dW", true, false, features, in, n, true});
  if (with_dx) out.push_back({name + ".dx", false, false, n, in, features, false});
}

// examples/fashion_mnist/mlp.toml (784-512-256-10) and cnn.toml (two conv + 2x2 pools leave
// 64 x 7 x 7 = 3136 features for linear 128 and 10) at batch 256, then the --size square and
// the 8192^3 square, the peak reference.
std::vector<NamedGemm> cuda_bench_gemms(std::int64_t size) {
  constexpr std::int64_t batch = 256, peak = 8192;
  std::vector<NamedGemm> g;
  add_linear(g, "mlp.linear1", batch, 784, 512, false);
  add_linear(g, "mlp.linear2", batch, 512, 256, true);
  add_linear(g, "mlp.linear3", batch, 256, 10, true);
  add_linear(g, "cnn.linear1", batch, 3136, 128, true);
  add_linear(g, "cnn.linear2", batch, 128, 10, true);
  g.push_back({fmt::format("square{}", size), false, false, size, size, size, false});
  if (size != peak) g.push_back({fmt::format("square{}", peak), false, false, peak, peak, peak, false});
  return g;
}

// --dtype: inputs f32 (strict or TF32 tensor cores), bf16 or f16.
GemmProblem cuda_problem(const NamedGemm& g, const std::string& dtype) {
  const DType ab = dtype == "bf16" ? DType::bf16 : dtype == "f16" ? DType::f16 : DType::f32;
  return GemmProblem{g.trans_a, g.trans_b, g.m, g.n, g.k, ab, g.c_f32 ? DType::f32 : ab, dtype == "tf32"};
}

void bench_gemm_cuda(Context& /*ctx*/, const GemmBenchOptions& o) {
  const GpuBackend& backend = gpu("bench gemm --backend cuda");
  const CudaGpu gpu = backend.current_gpu();
  if (!o.json) {
    log::info(
        "bench gemm: cuBLASLt on {} (GPU {}), medians of {} repeats of {} calls; used = ringtrain's algorithm "
        "(the heuristic's first), best = fastest candidate",
        gpu.name, gpu.ordinal, o.repeats, o.calls);
    log::info("  {:<20} {:>5} {:>5} {:>5} {:<5} {:>12} {:>12} {:>9} {:>10}", "gemm", "m", "n", "k", "dtype",
              "used TFLOP/s", "best TFLOP/s", "used/best", "candidates");
  }
  for (const NamedGemm& g : cuda_bench_gemms(o.size)) {
    for (const std::string& dtype : o.dtypes) {
      const GemmProblem p = cuda_problem(g, dtype);
      const std::vector<std::vector<double>> ms = backend.time_gemm_candidates(p, o.repeats, o.calls);
      const std::size_t count = ms.front().size();
      for (const auto& row : ms)
        RT_REQUIRE(row.size() == count, Error, "bench gemm {} {}: cuBLASLt offered {} and then {} algorithms", g.name,
                   dtype, count, row.size());
      std::vector<double> medians;  // per candidate, over the repeats
      for (std::size_t i = 0; i < count; ++i) {
        std::vector<double> runs;
        runs.reserve(ms.size());
        for (const auto& row : ms) runs.push_back(row[i]);
        medians.push_back(median(runs));
      }
      const auto best = static_cast<std::size_t>(std::min_element(medians.begin(), medians.end()) - medians.begin());
      const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
      const double used_tflops = flops / (medians[0] * 1e-3) / 1e12;
      const double best_tflops = flops / (medians[best] * 1e-3) / 1e12;
      std::vector<double> used_runs;
      used_runs.reserve(ms.size());
      for (const auto& row : ms) used_runs.push_back(row[0]);
      const nlohmann::json j = {{"bench", "gemm"},
                                {"backend", "cuda"},
                                {"gpu", gpu.name},
                                {"device", gpu.ordinal},
                                {"gemm", g.name},
                                {"m", g.m},
                                {"n", g.n},
                                {"k", g.k},
                                {"trans_a", g.trans_a},
                                {"trans_b", g.trans_b},
                                {"dtype", dtype},
                                {"c_dtype", dtype_name(p.c_type)},
                                {"repeats", o.repeats},
                                {"calls", o.calls},
                                {"candidates", count},
                                {"used_ms", medians[0]},
                                {"used_tflops", used_tflops},
                                {"best_candidate", best},
                                {"best_ms", medians[best]},
                                {"best_tflops", best_tflops},
                                {"used_vs_best", used_tflops / best_tflops},
                                {"used_ms_runs", used_runs}};
      if (o.json)
        log::info("{}", j.dump());
      else
        log::info("  {:<20} {:>5} {:>5} {:>5} {:<5} {:>12.2f} {:>12.2f} {:>9.3f} {:>10}", g.name, g.m, g.n, g.k, dtype,
                  used_tflops, best_tflops, used_tflops / best_tflops, count);
    }
  }
}

}  // namespace

void bench_gemm(Context& ctx, const GemmBenchOptions& o) {
  // As in training, cuda without a usable GPU warns (Context::bind) and the CPU is measured.
  run_collectively(ctx, [&] {
    ctx.bind(o.backend, o.threads);
    RT_REQUIRE(ctx.binding().backend != Device::cuda || ctx.world_size() == 1, ConfigError,
               "bench gemm --backend cuda times one GPU from one process: run it on 1 rank, not {}", ctx.world_size());
  });
  if (ctx.binding().backend == Device::cuda)
    bench_gemm_cuda(ctx, o);
  else
    bench_gemm_cpu(ctx, o);
}

}  // namespace ringtrain
