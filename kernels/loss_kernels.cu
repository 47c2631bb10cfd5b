// Fused softmax cross-entropy. Rows narrower than kWideRow (image classes): one warp per row
// (arg-max, then sum of exponentials in double, both by butterfly shuffles, which give every lane
// the same bits), then the row's gradient. Wider rows (a vocabulary): one block per row, each
// thread reading 16-byte vectors and keeping its maximum, sum of exponentials (rescaled when a
// vector raises the maximum: one pass for both) and arg-max, combined in a fixed shared-memory
// tree; then the gradient in a second pass. The batch sums run in one block with a fixed tree.
#include <cmath>

#include "kernels/launch.cuh"
#include "kernels/loss_kernels.hpp"
#include "ringtrain/nn/running_softmax_rule.hpp"
#include "check/cuda_check.hpp"

namespace ringtrain::kernels {
namespace {

using namespace detail;

constexpr unsigned kFullMask = 0xffffffffu;

// The better of two (value, index) candidates: larger value, then smaller index; index -1 is
// "none". Symmetric, so every lane of a butterfly ends with the same choice.
__device__ inline void take_better(float& v, std::int64_t& j, float ov, std::int64_t oj) {
  if (oj < 0) return;
  if (j < 0 || ov > v || (ov == v && oj < j)) {
    v = ov;
    j = oj;
  }
}

// A row of at least kWideRow classes takes a block of kWideThreads. The row is read as whole
// 16-byte vectors (8 bf16/f16 or 4 f32 a load), kWideUnroll of them in flight per thread, with a
// head and a tail of single elements around them (GPT-2's rows of 50257 start anywhere). One
// element a load left the H200 bound by instructions: 1.26 ms a step for 8192 x 50257 bf16
// logits, against ~0.4 ms of traffic (two 2-byte loads per lane before that: 3.1 ms).
constexpr std::int64_t kWideRow = 2048;
constexpr int kWideThreads = 256;
constexpr int kWideUnroll = 2;

template <typename T>
constexpr int kVector = 16 / static_cast<int>(sizeof(T));

// Calls f(j0, v, count) for this thread's runs of a row of k, in increasing j: v[0..count) are
// elements j0.. as float. Runs: one element of the head (the elements before the first 16-byte
// boundary), whole vectors (kVector<T> elements; vector i goes to thread i mod kWideThreads), one
// element of the tail.
template <typename T, typename F>
__device__ inline void for_each_run(const T* z, std::int64_t k, int tid, F&& f) {
  constexpr int kVec = kVector<T>;
  const auto misaligned = static_cast<int>(reinterpret_cast<std::uintptr_t>(z) % 16 / sizeof(T));
  const std::int64_t head = min(k, static_cast<std::int64_t>((kVec - misaligned) % kVec));
  float one;
  if (tid < head) {
    one = to_float(z[tid]);
    f(std::int64_t{tid}, &one, 1);
  }
  const std::int64_t vectors = (k - head) / kVec;
  const auto* body = reinterpret_cast<const uint4*>(z + head);
  for (std::int64_t base = tid; base < vectors; base += std::int64_t{kWideThreads} * kWideUnroll) {
    uint4 raw[kWideUnroll];
#pragma unroll
    for (int u = 0; u < kWideUnroll; ++u) {
      const std::int64_t i = base + std::int64_t{u} * kWideThreads;
      if (i < vectors) raw[u] = body[i];
    }
#pragma unroll
    for (int u = 0; u < kWideUnroll; ++u) {
      const std::int64_t i = base + std::int64_t{u} * kWideThreads;
      if (i >= vectors) break;
      T elements[kVec];
      memcpy(elements, &raw[u], sizeof(raw[u]));
      float v[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) v[e] = to_float(elements[e]);
      f(head + i * kVec, v, kVec);
    }
  }
  const std::int64_t j = head + vectors * kVec + tid;  // the tail: fewer than kVec elements
  if (j < k) {
    one = to_float(z[j]);
    f(j, &one, 1);
  }
}

template <typename T>
__global__ void softmax_xent_wide_kernel(const T* logits, const std::int32_t* labels, std::int64_t n, std::int64_t k,
                                         float grad_scale, T* dlogits, float* row_loss, std::int32_t* row_correct) {
  __shared__ float tree_max[kWideThreads], tree_sum[kWideThreads], tree_best[kWideThreads];
  __shared__ std::int64_t tree_best_j[kWideThreads];
  constexpr int kVec = kVector<T>;
  const int tid = static_cast<int>(threadIdx.x);
  // dlogits' rows lie as logits' do relative to 16 bytes when the two bases do: vector stores then.
  const bool vector_stores =
      (reinterpret_cast<std::uintptr_t>(dlogits) - reinterpret_cast<std::uintptr_t>(logits)) % 16 == 0;
  for (std::int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const T* z = logits + row * k;
    float max = -INFINITY, sum = 0.0f, best = 0.0f;
    std::int64_t best_j = -1;
    for_each_run(z, k, tid, [&](std::int64_t j0, const float* v, int count) {
      for (int e = 0; e < count; ++e) take_better(best, best_j, v[e], j0 + e);
      add_exps(max, sum, v, count);
    });
    tree_max[tid] = max;
    tree_sum[tid] = sum;
    tree_best[tid] = best;
    tree_best_j[tid] = best_j;
    __syncthreads();
    for (int half = kWideThreads / 2; half > 0; half /= 2) {
      if (tid < half) {
        merge_exp(tree_max[tid], tree_sum[tid], tree_max[tid + half], tree_sum[tid + half]);
        take_better(tree_best[tid], tree_best_j[tid], tree_best[tid + half], tree_best_j[tid + half]);
      }
      __syncthreads();
    }
    max = tree_max[0];
    sum = tree_sum[0];
    const std::int32_t label = labels[row];
    const bool valid = label >= 0 && label < k;
    const float inv = 1.0f / sum;
    if (tid == 0) {  // the row's loss and arg-max, then its gradient
      row_loss[row] =
          valid ? static_cast<float>(log(static_cast<double>(sum)) - static_cast<double>(to_float(z[label]) - max))
                : NAN;
      row_correct[row] = tree_best_j[0] == label ? 1 : 0;
    }
    T* d = dlogits + row * k;
    for_each_run(z, k, tid, [&](std::int64_t j0, const float* v, int count) {
      T g[kVec];
      for (int e = 0; e < count; ++e)
        g[e] = from_float<T>((expf(v[e] - max) * inv - (j0 + e == label ? 1.0f : 0.0f)) * grad_scale);
      if (count == kVec && vector_stores) {
        uint4 packed;
        memcpy(&packed, g, sizeof(packed));
        *reinterpret_cast<uint4*>(d + j0) = packed;
      } else {
        for (int e = 0; e < count; ++e) d[j0 + e] = g[e];
      }
    });
    __syncthreads();  // the tree is reused by the block's next row
  }
}

template <typename T>
__global__ void softmax_xent_kernel(const T* logits, const std::int32_t* labels, std::int64_t n, std::int64_t k,
                                    float grad_scale, T* dlogits, float* row_loss, std::int32_t* row_correct) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  for (std::int64_t row = warp_index(); row < n; row += warp_count()) {
    const T* z = logits + row * k;
    float best = 0.0f;
    std::int64_t best_j = -1;
    for (std::int64_t j = lane; j < k; j += kWarp) take_better(best, best_j, to_float(z[j]), j);
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const float ov = __shfl_xor_sync(kFullMask, best, offset);
      const std::int64_t oj = __shfl_xor_sync(kFullMask, best_j, offset);
      take_better(best, best_j, ov, oj);
    }
    double sum = 0.0;
    for (std::int64_t j = lane; j < k; j += kWarp) sum += static_cast<double>(expf(to_float(z[j]) - best));
    sum = warp_sum(sum);

    const std::int32_t label = labels[row];
    const bool valid = label >= 0 && label < k;
    const float inv = static_cast<float>(1.0 / sum);
    T* d = dlogits + row * k;
    for (std::int64_t j = lane; j < k; j += kWarp) {
      const float p = expf(to_float(z[j]) - best) * inv;
      d[j] = from_float<T>((p - (j == label ? 1.0f : 0.0f)) * grad_scale);
    }
    if (lane == 0) {
      row_loss[row] = valid ? static_cast<float>(log(sum) - static_cast<double>(to_float(z[label]) - best)) : NAN;
      row_correct[row] = best_j == label ? 1 : 0;
    }
  }
}

__global__ void loss_sums_kernel(const float* row_loss, const std::int32_t* row_correct, std::int64_t n, double* out) {
  __shared__ double loss[kThreads];
  __shared__ double correct[kThreads];
  double l = 0.0, c = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    l += static_cast<double>(row_loss[i]);
    c += static_cast<double>(row_correct[i]);
  }
  loss[threadIdx.x] = l;
  correct[threadIdx.x] = c;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      loss[threadIdx.x] += loss[threadIdx.x + half];
      correct[threadIdx.x] += correct[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[0] = loss[0];
    out[1] = correct[0];
  }
}

}  // namespace

void launch_softmax_xent(const void* logits, DType dtype, const std::int32_t* labels, std::int64_t n, std::int64_t k,
                         float grad_scale, void* dlogits, float* row_loss, std::int32_t* row_correct, void* stream) {
  dispatch_float(dtype, "softmax_xent", [&](auto tag) {
    using T = decltype(tag);
    require_count("softmax_xent", n);
    if (n == 0) return;
    RT_REQUIRE(k >= 1, Error, "softmax_xent: {} classes (need at least 1)", k);
    if (k >= kWideRow) {
      const auto blocks = static_cast<unsigned>(n < kMaxBlocks ? n : kMaxBlocks);
      softmax_xent_wide_kernel<T><<<blocks, kWideThreads, 0, as_stream(stream)>>>(
          static_cast<const T*>(logits), labels, n, k, grad_scale, static_cast<T*>(dlogits), row_loss, row_correct);
      check_launch("softmax_xent_wide_kernel");
      return;
    }
    softmax_xent_kernel<T><<<warp_grid(n), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(logits), labels, n, k, grad_scale, static_cast<T*>(dlogits), row_loss, row_correct);
    check_launch("softmax_xent_kernel");
  });
}

void launch_loss_sums(const float* row_loss, const std::int32_t* row_correct, std::int64_t n, double* out,
                      void* stream) {
  require_count("loss_sums", n);
  if (n == 0) {
    RT_CUDA_CHECK(cudaMemsetAsync(out, 0, 2 * sizeof(double), as_stream(stream)));
    return;
  }
  loss_sums_kernel<<<1, kThreads, 0, as_stream(stream)>>>(row_loss, row_correct, n, out);
  check_launch("loss_sums_kernel");
}

}  // namespace ringtrain::kernels
