// The `ringtrain bench` benchmarks (src/bench/bench_*.cpp): one entry point each, taking its
// parsed options; src/cli/cmd_bench.cpp parses the command line into them. Each is collective
// over the ranks of the context and prints on rank 0; cuda without a GPU warns and runs on the
// CPU (Context::bind), as training does.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/core/config.hpp"
#include "ringtrain/data/loader.hpp"

namespace ringtrain {

class Context;

// `bench gemm`: OpenBLAS sgemm on every rank at once (cpu), or cuBLASLt on one GPU (cuda).
struct GemmBenchOptions {
  Device backend = Device::cpu;
  std::int64_t size = 1024;
  double seconds = 1.0;  // cpu
  int threads = 0;       // cpu
  int repeats = 3;
  std::vector<std::string> dtypes = {"f32", "tf32", "bf16"};  // cuda
  int calls = 20;                                             // cuda
  bool json = false;                                          // cuda (the cpu bench prints JSON)
};
void bench_gemm(Context& ctx, const GemmBenchOptions& o);

// `bench allreduce`: time, algbw and busbw per message size and communicator backend.
struct AllreduceBenchOptions {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{256} << 20;
  std::size_t factor = 2;
  int iters = 20;
  int warmup = 5;
  std::vector<std::string> backends = {"ring", "mpi"};
  std::string dtype = "f32";
  std::string wire_dtype = "f32";
  int load_threads = 0;  // per rank: threads computing beside the collective (a busy neighbour)
  bool json = false;
};
// The names --backends and --dtype accept.
std::vector<std::string> allreduce_bench_backends();
std::vector<std::string> allreduce_bench_dtypes();
void bench_allreduce(Context& ctx, const AllreduceBenchOptions& o);

// `bench io`: one loader pass over a dataset against raw reads of the same files.
struct IoBenchOptions {
  std::vector<std::string> sources;
  std::string strategy = "memory";
  std::string images_key = "images";
  std::string labels_key = "labels";
  std::int64_t batch = 64;
  int prefetch = 2;
  std::int64_t shuffle_window = LoaderOptions{}.shuffle_window;
  std::int64_t read_ahead = LoaderOptions{}.read_ahead;
  int repeats = 5;
  std::string order_out;  // PREFIX: each rank writes its pass's sample order to PREFIX.rankR.i64
};
void bench_io(Context& ctx, const IoBenchOptions& o);

// `bench ckpt`: checkpoint write and read bandwidth against raw file I/O of the same bytes.
struct CkptBenchOptions {
  std::int64_t params = 100'000'000;
  std::string dir = "runs/bench-ckpt";
  int repeats = 5;
};
void bench_ckpt(Context& ctx, const CkptBenchOptions& o);

// `bench prune`: forward + backward of an MLP against the same MLP with neurons removed.
struct PruneBenchOptions {
  std::string config = "examples/fashion_mnist/mlp.toml";
  std::vector<std::int64_t> input = {1, 28, 28};
  double fraction = 0.5;
  std::int64_t batch = 128;
  int iterations = 50;
  int repeats = 7;
  int threads = 1;
};
void bench_prune(Context& ctx, const PruneBenchOptions& o);

// `bench train CONFIG`: timed training steps of a config.
struct TrainBenchOptions {
  std::string config;
  ConfigOverrides overrides;  // --set / --unset
  bool synthetic = false;
  int warmup = 5;
  int steps = 30;
  bool layers = false;  // per-layer forward and backward times (host models)
  bool json = false;
};
void bench_train(Context& ctx, const TrainBenchOptions& o);

// `bench optim`: the fused optimizer updates against a plain copy of the arena.
struct OptimBenchOptions {
  Device backend = Device::cpu;
  std::int64_t params = 100'000'000;
  int iterations = 10;
  int repeats = 5;
  bool json = false;
};
void bench_optim(Context& ctx, const OptimBenchOptions& o);

}  // namespace ringtrain
