// Fused softmax cross-entropy: one warp per row (arg-max, then sum of exponentials in double,
// both by butterfly shuffles, which give every lane the same bits), then the row's gradient.
// The batch sums run in one block with a fixed shared-memory tree.
#include <cmath>

#include "kernels/launch.cuh"
#include "kernels/loss_kernels.hpp"
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
