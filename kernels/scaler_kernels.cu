// Non-finite check: a bit test of the exponent per element; threads that find one store 1
// (all writers store the same value, so the race is benign), one store per thread at most.
#include "kernels/launch.cuh"
#include "kernels/scaler_kernels.hpp"
#include "ringtrain/train/step_decision.hpp"

namespace ringtrain::kernels {
namespace {

using namespace detail;

__global__ void find_nonfinite_kernel(const float* __restrict__ x, std::int64_t n, std::int32_t* flag) {
  bool found = false;
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    found |= (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
  if (found) *flag = 1;
}

// Block b sums elements b*kThreads + t, stepping by the whole grid (a fixed assignment), then
// reduces its threads' sums in a fixed tree: the result never depends on scheduling.
__global__ void sum_squares_kernel(const float* __restrict__ x, std::int64_t n, double* out) {
  __shared__ double sums[kThreads];
  double s = 0.0;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const double v = x[i];
    s += v * v;
  }
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = sums[0];
}

__global__ void sum_doubles_kernel(const double* __restrict__ x, int n, double* out) {
  __shared__ double sums[kThreads];
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += kThreads) s += x[i];
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sums[0];
}

__global__ void step_stats_kernel(const double* loss_slots, std::int64_t slots, double rows,
                                  const std::int32_t* nonfinite_flag, const double* range_sums,
                                  const std::int32_t* shard_ranges, int shards, bool with_sums, double* stats) {
  double loss = 0.0, correct = 0.0;
  for (std::int64_t i = 0; i < slots; ++i) {
    loss += loss_slots[2 * i];
    correct += loss_slots[2 * i + 1];
  }
  stats[0] = loss / rows;
  stats[1] = correct;
  stats[2] = *nonfinite_flag != 0 ? 1.0 : 0.0;
  int next = 0;
  for (int q = 0; q < shards; ++q) {
    double sum = 0.0;
    for (int r = 0; r < shard_ranges[q]; ++r) sum += range_sums[next++];
    stats[kStepStatsHeader + q] = with_sums ? sum : 0.0;
  }
}

__global__ void decide_step_kernel(const double* stats, int shards, double world_k, double loss_scale, double clip,
                                   float* update_scale) {
  const StepDecision d = decide_step(stats, shards, world_k, loss_scale, clip);
  *update_scale = d.overflow ? 0.0f : static_cast<float>(d.update_scale);
}

}  // namespace

void launch_step_stats(const double* loss_slots, std::int64_t slots, double rows, const std::int32_t* nonfinite_flag,
                       const double* range_sums, const std::int32_t* shard_ranges, int shards, bool with_sums,
                       double* stats, void* stream) {
  step_stats_kernel<<<1, 1, 0, as_stream(stream)>>>(loss_slots, slots, rows, nonfinite_flag, range_sums, shard_ranges,
                                                    shards, with_sums, stats);
  check_launch("step_stats_kernel");
}

void launch_decide_step(const double* stats, int shards, double world_k, double loss_scale, double clip,
                        float* update_scale, void* stream) {
  decide_step_kernel<<<1, 1, 0, as_stream(stream)>>>(stats, shards, world_k, loss_scale, clip, update_scale);
  check_launch("decide_step_kernel");
}

void launch_sum_squares(const float* x, std::int64_t n, double* partials, double* out, void* stream) {
  sum_squares_kernel<<<kSumSquaresBlocks, kThreads, 0, as_stream(stream)>>>(x, n, partials);
  check_launch("sum_squares_kernel");
  sum_doubles_kernel<<<1, kThreads, 0, as_stream(stream)>>>(partials, kSumSquaresBlocks, out);
  check_launch("sum_doubles_kernel");
}

void launch_find_nonfinite(const float* x, std::int64_t n, std::int32_t* flag, void* stream) {
  launch_elementwise(find_nonfinite_kernel, "find_nonfinite_kernel", n, stream, x, n, flag);
}

}  // namespace ringtrain::kernels
