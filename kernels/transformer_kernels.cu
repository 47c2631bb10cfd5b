// LayerNorm, embedding and attention kernels. LayerNorm runs one warp per row (two passes over the row for
// the mean and the centred variance, as the CPU layer); its parameter gradients are summed per
// chunk of kLayerNormChunk rows and then over the chunks in a fixed order. The embedding's token-table
// gradient sorts the positions by token (CUB's stable radix sort of (token, row) pairs) and lets
// one thread per column walk each token's positions in batch order. Attention's kernels are the
// causal softmax of the unfused attention (maximum, sum, output: three passes) and its backward, one warp per
// row (its GEMMs are cuBLASLt's).
#include <cub/device/device_radix_sort.cuh>

#include "check/cuda_check.hpp"
#include "kernels/launch.cuh"
#include "kernels/transformer_kernels.hpp"

namespace ringtrain::kernels {
namespace {

using namespace detail;

constexpr std::int64_t kLayerNormChunk = 32;  // rows per partial sum of the parameter gradients

template <typename T>
__global__ void layernorm_forward_kernel(T* y, const T* x, const float* w, const float* b, float* mean_out,
                                         float* rstd_out, std::int64_t rows, std::int64_t c, float eps) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const float inv_c = 1.0f / static_cast<float>(c);
  for (std::int64_t r = warp_index(); r < rows; r += warp_count()) {
    const T* in = x + r * c;
    float s = 0.0f;
    for (std::int64_t i = lane; i < c; i += kWarp) s += to_float(in[i]);
    const float mean = warp_sum(s) * inv_c;
    float v = 0.0f;
    for (std::int64_t i = lane; i < c; i += kWarp) {
      const float d = to_float(in[i]) - mean;
      v += d * d;
    }
    const float rstd = 1.0f / sqrtf(warp_sum(v) * inv_c + eps);
    T* out = y + r * c;
    for (std::int64_t i = lane; i < c; i += kWarp)
      out[i] = from_float<T>((to_float(in[i]) - mean) * rstd * w[i] + b[i]);
    if (lane == 0) {
      mean_out[r] = mean;
      rstd_out[r] = rstd;
    }
  }
}

template <typename T>
__global__ void layernorm_dx_kernel(T* dx, const T* dy, const T* x, const float* w, const float* mean,
                                    const float* rstd, std::int64_t rows, std::int64_t c) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const float inv_c = 1.0f / static_cast<float>(c);
  for (std::int64_t r = warp_index(); r < rows; r += warp_count()) {
    const T* g_row = dy + r * c;
    const T* x_row = x + r * c;
    const float m = mean[r], s = rstd[r];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (std::int64_t i = lane; i < c; i += kWarp) {
      const float g = to_float(g_row[i]) * w[i];
      sum_g += g;
      sum_gx += g * (to_float(x_row[i]) - m) * s;
    }
    const float mg = warp_sum(sum_g) * inv_c, mgx = warp_sum(sum_gx) * inv_c;
    T* out = dx + r * c;
    for (std::int64_t i = lane; i < c; i += kWarp) {
      const float g = to_float(g_row[i]) * w[i];
      const float xhat = (to_float(x_row[i]) - m) * s;
      out[i] = from_float<T>(s * (g - mg - xhat * mgx));
    }
  }
}

// partial[k][0][col] and partial[k][1][col]: chunk k's sums of dy xhat and of dy.
template <typename T>
__global__ void layernorm_param_partial_kernel(float* partial, const T* dy, const T* x, const float* mean,
                                               const float* rstd, std::int64_t rows, std::int64_t c,
                                               std::int64_t chunks) {
  const std::int64_t col = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (col >= c) return;
  for (std::int64_t k = blockIdx.y; k < chunks; k += gridDim.y) {
    float dw = 0.0f, db = 0.0f;
    const std::int64_t end = min(rows, (k + 1) * kLayerNormChunk);
    for (std::int64_t r = k * kLayerNormChunk; r < end; ++r) {
      const float g = to_float(dy[r * c + col]);
      dw += g * (to_float(x[r * c + col]) - mean[r]) * rstd[r];
      db += g;
    }
    partial[(k * 2) * c + col] = dw;
    partial[(k * 2 + 1) * c + col] = db;
  }
}

// The chunks' partial sums per column, by blocks of kReduceColumns columns x kReduceLanes lanes:
// lane l adds chunks l, l + kReduceLanes, ... in order, then lane 0 adds the lanes' sums in
// order (a fixed order: the same bits every run). One thread per column walking every chunk
// left 3 blocks busy for GPT-2's 768 columns: 54 us per LayerNorm on an H200.
constexpr int kReduceColumns = 32, kReduceLanes = kThreads / kReduceColumns;

__global__ void layernorm_param_reduce_kernel(float* dweight, float* dbias, const float* partial, std::int64_t c,
                                              std::int64_t chunks) {
  __shared__ float lane_w[kReduceLanes][kReduceColumns], lane_b[kReduceLanes][kReduceColumns];
  const int column = static_cast<int>(threadIdx.x) % kReduceColumns,
            lane = static_cast<int>(threadIdx.x) / kReduceColumns;
  for (std::int64_t first = blockIdx.x * std::int64_t{kReduceColumns}; first < c;
       first += gridDim.x * std::int64_t{kReduceColumns}) {
    const std::int64_t col = first + column;
    float dw = 0.0f, db = 0.0f;
    if (col < c)
      for (std::int64_t k = lane; k < chunks; k += kReduceLanes) {
        dw += partial[(k * 2) * c + col];
        db += partial[(k * 2 + 1) * c + col];
      }
    lane_w[lane][column] = dw;
    lane_b[lane][column] = db;
    __syncthreads();
    if (lane == 0 && col < c) {
      for (int l = 1; l < kReduceLanes; ++l) {
        dw += lane_w[l][column];
        db += lane_b[l][column];
      }
      dweight[col] = dw;
      dbias[col] = db;
    }
    __syncthreads();  // the lanes' sums are rewritten for the next columns
  }
}

// Columns across blockIdx.x / threadIdx.x, rows across blockIdx.y (grid-stride): no division.
template <typename T>
__global__ void embedding_forward_kernel(T* y, const std::int32_t* tokens, const float* wte, const float* wpe,
                                         std::int64_t rows, std::int64_t t, std::int64_t c, std::int64_t vocab,
                                         std::int64_t position) {
  const std::int64_t col = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (col >= c) return;
  std::int64_t p = blockIdx.y % t;  // the row's position, advanced with the row
  const std::int64_t p_step = gridDim.y % t;
  for (std::int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const std::int64_t token = min(max(static_cast<std::int64_t>(tokens[r]), std::int64_t{0}), vocab - 1);
    y[r * c + col] = from_float<T>(wte[token * c + col] + wpe[(position + p) * c + col]);
    p += p_step;
    if (p >= t) p -= t;
  }
}

// dwpe[p][col] = sum over samples n of dy[n t + p][col], n in order.
template <typename T>
__global__ void embedding_position_grad_kernel(float* dwpe, const T* dy, std::int64_t samples, std::int64_t t,
                                               std::int64_t c) {
  const std::int64_t col = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (col >= c) return;
  for (std::int64_t p = blockIdx.y; p < t; p += gridDim.y) {
    float acc = 0.0f;
    for (std::int64_t n = 0; n < samples; ++n) acc += to_float(dy[(n * t + p) * c + col]);
    dwpe[p * c + col] = acc;
  }
}

__global__ void iota_kernel(std::int32_t* out, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) out[i] = static_cast<std::int32_t>(i);
}

__global__ void clamp_tokens_kernel(std::int32_t* out, const std::int32_t* tokens, std::int64_t n, std::int64_t vocab) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    out[i] = static_cast<std::int32_t>(min(max(static_cast<std::int64_t>(tokens[i]), std::int64_t{0}), vocab - 1));
}

// For each sorted position j that starts a token's run: dwte[token] = that run's dy rows summed
// in order (the rows ascend within a run: the sort is stable over rows in batch order).
template <typename T>
__global__ void embedding_token_grad_kernel(float* dwte, const T* dy, const std::int32_t* sorted_tokens,
                                            const std::int32_t* sorted_rows, std::int64_t rows, std::int64_t c) {
  const std::int64_t col = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (col >= c) return;
  for (std::int64_t j = blockIdx.y; j < rows; j += gridDim.y) {
    const std::int32_t token = sorted_tokens[j];
    if (j > 0 && sorted_tokens[j - 1] == token) continue;
    float acc = 0.0f;
    for (std::int64_t k = j; k < rows && sorted_tokens[k] == token; ++k)
      acc += to_float(dy[static_cast<std::int64_t>(sorted_rows[k]) * c + col]);
    dwte[static_cast<std::int64_t>(token) * c + col] = acc;
  }
}

// Warp per row of a [batches * t, t] matrix; row i of each matrix sees columns 0..i. The maximum,
// then the sum of exponentials, then the output: three passes over the visible scores. (A one-pass
// running maximum and sum, as the loss kernel's, made this kernel 1.45x slower on an H200: 5.7
// against 3.9 ms a GPT-2 step.) Only the unfused attention runs it.
template <typename T>
__global__ void causal_softmax_kernel(T* p, const float* s, float* lse_out, const float* lse_in, std::int64_t rows,
                                      std::int64_t t) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (std::int64_t r = warp_index(); r < rows; r += warp_count()) {
    const std::int64_t visible = r % t + 1;
    const float* row = s + r * t;
    float lse = 0.0f;
    if (lse_in != nullptr) {
      lse = lse_in[r];
    } else {
      float m = -INFINITY;
      for (std::int64_t j = lane; j < visible; j += kWarp) m = fmaxf(m, row[j]);
      for (int offset = kWarp / 2; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
      float sum = 0.0f;
      for (std::int64_t j = lane; j < visible; j += kWarp) sum += expf(row[j] - m);
      lse = m + logf(warp_sum(sum));
      if (lane == 0) lse_out[r] = lse;
    }
    T* out = p + r * t;
    for (std::int64_t j = lane; j < t; j += kWarp) out[j] = from_float<T>(j < visible ? expf(row[j] - lse) : 0.0f);
  }
}

// Warp per row as causal_softmax_kernel: over row i's visible columns 0..i, ds = p (dp - sum of
// p dp), as the CPU layer; above the diagonal p is 0, so ds is written 0 and dp is not read there
// (half the row's traffic on average). Restrict-qualified: the loads of the next elements need
// not wait for the stores to the row.
template <typename T>
__global__ void causal_softmax_backward_kernel(T* __restrict__ p_ds, const float* __restrict__ dp, std::int64_t rows,
                                               std::int64_t t) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (std::int64_t r = warp_index(); r < rows; r += warp_count()) {
    const std::int64_t visible = r % t + 1;
    T* row = p_ds + r * t;
    const float* g = dp + r * t;
    float d = 0.0f;
#pragma unroll 4
    for (std::int64_t j = lane; j < visible; j += kWarp) d += to_float(row[j]) * g[j];
    d = warp_sum(d);  // every lane has read its elements of the row before any writes
#pragma unroll 4
    for (std::int64_t j = lane; j < visible; j += kWarp) row[j] = from_float<T>(to_float(row[j]) * (g[j] - d));
    for (std::int64_t j = visible + lane; j < t; j += kWarp) row[j] = from_float<T>(0.0f);
  }
}

int bits_for(std::int64_t vocab) {
  int bits = 1;
  while (bits < 31 && (std::int64_t{1} << bits) < vocab) ++bits;
  return bits;
}

// The scratch of launch_embedding_backward: sorted tokens, row ids in and sorted, CUB's temp.
struct EmbeddingScratch {
  std::int32_t *keys_in, *keys_out, *rows_in, *rows_out;
  void* temp;
  std::size_t temp_bytes;
};

std::size_t aligned_bytes(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

std::size_t cub_sort_bytes(std::int64_t rows, std::int64_t vocab) {
  std::size_t bytes = 0;
  RT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const std::int32_t*>(nullptr), static_cast<std::int32_t*>(nullptr),
      static_cast<const std::int32_t*>(nullptr), static_cast<std::int32_t*>(nullptr), rows, 0, bits_for(vocab)));
  return bytes;
}

EmbeddingScratch carve(void* scratch, std::size_t scratch_bytes, std::int64_t rows, std::int64_t vocab) {
  const std::size_t ids = aligned_bytes(static_cast<std::size_t>(rows) * sizeof(std::int32_t));
  RT_REQUIRE(scratch_bytes >= embedding_backward_scratch_bytes(rows, vocab), Error,
             "embedding backward: scratch of {} bytes, {} needed for {} positions", scratch_bytes,
             embedding_backward_scratch_bytes(rows, vocab), rows);
  auto* base = static_cast<char*>(scratch);
  EmbeddingScratch s{};
  s.keys_in = reinterpret_cast<std::int32_t*>(base);
  s.keys_out = reinterpret_cast<std::int32_t*>(base + ids);
  s.rows_in = reinterpret_cast<std::int32_t*>(base + 2 * ids);
  s.rows_out = reinterpret_cast<std::int32_t*>(base + 3 * ids);
  s.temp = base + 4 * ids;
  s.temp_bytes = scratch_bytes - 4 * ids;
  return s;
}

}  // namespace

void launch_layernorm_forward(void* y, const void* x, const float* weight, const float* bias, float* mean, float* rstd,
                              std::int64_t rows, std::int64_t c, float eps, DType dtype, void* stream) {
  require_count("layernorm_forward", rows * c);
  if (rows == 0 || c == 0) return;
  dispatch_float(dtype, "layernorm_forward", [&](auto tag) {
    using T = decltype(tag);
    layernorm_forward_kernel<T><<<warp_grid(rows), kThreads, 0, as_stream(stream)>>>(
        static_cast<T*>(y), static_cast<const T*>(x), weight, bias, mean, rstd, rows, c, eps);
    check_launch("layernorm_forward_kernel");
  });
}

std::int64_t layernorm_backward_scratch(std::int64_t rows, std::int64_t c) {
  return (rows + kLayerNormChunk - 1) / kLayerNormChunk * 2 * c;
}

void launch_layernorm_backward(void* dx, float* dweight, float* dbias, const void* dy, const void* x,
                               const float* weight, const float* mean, const float* rstd, std::int64_t rows,
                               std::int64_t c, float* scratch, DType dtype, void* stream) {
  require_count("layernorm_backward", rows * c);
  if (c == 0) return;
  const std::int64_t chunks = (rows + kLayerNormChunk - 1) / kLayerNormChunk;
  dispatch_float(dtype, "layernorm_backward", [&](auto tag) {
    using T = decltype(tag);
    const auto* g = static_cast<const T*>(dy);
    const auto* in = static_cast<const T*>(x);
    if (dx != nullptr && rows > 0) {
      layernorm_dx_kernel<T><<<warp_grid(rows), kThreads, 0, as_stream(stream)>>>(static_cast<T*>(dx), g, in, weight,
                                                                                  mean, rstd, rows, c);
      check_launch("layernorm_dx_kernel");
    }
    if (chunks > 0) {
      layernorm_param_partial_kernel<T>
          <<<column_row_grid(c, chunks), kThreads, 0, as_stream(stream)>>>(scratch, g, in, mean, rstd, rows, c, chunks);
      check_launch("layernorm_param_partial_kernel");
    }
    const std::int64_t column_blocks = (c + kReduceColumns - 1) / kReduceColumns;
    layernorm_param_reduce_kernel<<<static_cast<unsigned>(column_blocks < kMaxBlocks ? column_blocks : kMaxBlocks),
                                    kThreads, 0, as_stream(stream)>>>(dweight, dbias, scratch, c, chunks);
    check_launch("layernorm_param_reduce_kernel");
  });
}

void launch_embedding_forward(void* y, const std::int32_t* tokens, const float* wte, const float* wpe,
                              std::int64_t rows, std::int64_t t, std::int64_t c, std::int64_t vocab,
                              std::int64_t position, DType dtype, void* stream) {
  require_count("embedding_forward", rows * c);
  if (rows == 0 || c == 0) return;
  RT_REQUIRE(t > 0 && vocab > 0, Error, "embedding_forward: t = {} and vocab = {} must be positive", t, vocab);
  dispatch_float(dtype, "embedding_forward", [&](auto tag) {
    using T = decltype(tag);
    embedding_forward_kernel<T><<<column_row_grid(c, rows), kThreads, 0, as_stream(stream)>>>(
        static_cast<T*>(y), tokens, wte, wpe, rows, t, c, vocab, position);
    check_launch("embedding_forward_kernel");
  });
}

std::size_t embedding_backward_scratch_bytes(std::int64_t rows, std::int64_t vocab) {
  return 4 * aligned_bytes(static_cast<std::size_t>(rows) * sizeof(std::int32_t)) + cub_sort_bytes(rows, vocab);
}

void launch_embedding_backward(float* dwte, float* dwpe, const void* dy, const std::int32_t* tokens, std::int64_t rows,
                               std::int64_t t, std::int64_t c, std::int64_t vocab, std::int64_t block, void* scratch,
                               std::size_t scratch_bytes, DType dtype, void* stream) {
  require_count("embedding_backward", rows * c);
  RT_REQUIRE(t > 0 && rows % t == 0 && t <= block, Error,
             "embedding_backward: {} positions are not whole samples of t = {} <= block = {}", rows, t, block);
  const cudaStream_t s = as_stream(stream);
  RT_CUDA_CHECK(cudaMemsetAsync(dwpe, 0, static_cast<std::size_t>(block * c) * sizeof(float), s));
  if (dwte != nullptr) RT_CUDA_CHECK(cudaMemsetAsync(dwte, 0, static_cast<std::size_t>(vocab * c) * sizeof(float), s));
  if (rows == 0 || c == 0) return;
  dispatch_float(dtype, "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    const auto* g = static_cast<const T*>(dy);
    embedding_position_grad_kernel<T><<<column_row_grid(c, t), kThreads, 0, s>>>(dwpe, g, rows / t, t, c);
    check_launch("embedding_position_grad_kernel");
    if (dwte == nullptr) return;
    EmbeddingScratch sc = carve(scratch, scratch_bytes, rows, vocab);
    launch_elementwise(clamp_tokens_kernel, "clamp_tokens_kernel", rows, stream, sc.keys_in, tokens, rows, vocab);
    launch_elementwise(iota_kernel, "iota_kernel", rows, stream, sc.rows_in, rows);
    RT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sc.temp, sc.temp_bytes, sc.keys_in, sc.keys_out, sc.rows_in,
                                                  sc.rows_out, rows, 0, bits_for(vocab), s));
    embedding_token_grad_kernel<T>
        <<<column_row_grid(c, rows), kThreads, 0, s>>>(dwte, g, sc.keys_out, sc.rows_out, rows, c);
    check_launch("embedding_token_grad_kernel");
  });
}

void launch_causal_softmax(void* p, const float* s, float* lse_out, const float* lse_in, std::int64_t batches,
                           std::int64_t t, DType dtype, void* stream) {
  require_count("causal_softmax", batches * t);
  RT_REQUIRE((lse_out == nullptr) != (lse_in == nullptr), Error, "causal_softmax: exactly one of lse_out, lse_in");
  if (batches * t == 0) return;
  dispatch_float(dtype, "causal_softmax", [&](auto tag) {
    using T = decltype(tag);
    causal_softmax_kernel<T><<<warp_grid(batches * t), kThreads, 0, as_stream(stream)>>>(static_cast<T*>(p), s, lse_out,
                                                                                         lse_in, batches * t, t);
    check_launch("causal_softmax_kernel");
  });
}

void launch_causal_softmax_backward(void* p_then_ds, const float* dp, std::int64_t batches, std::int64_t t, DType dtype,
                                    void* stream) {
  require_count("causal_softmax_backward", batches * t * t);
  if (batches * t == 0) return;
  dispatch_float(dtype, "causal_softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    causal_softmax_backward_kernel<T>
        <<<warp_grid(batches * t), kThreads, 0, as_stream(stream)>>>(static_cast<T*>(p_then_ds), dp, batches * t, t);
    check_launch("causal_softmax_backward_kernel");
  });
}

}  // namespace ringtrain::kernels
