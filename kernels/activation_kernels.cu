// Bias + activation forward, ReLU and GELU forward/backward and bias gradient. With a bias the
// forward runs on a 2-D grid (columns across x, rows across y), so no element divides its index.
// The bias gradient of [rows][channels] (a Linear's, inner == 1) gives each block 32 adjacent
// channels and 8 row phases (a warp reads 32 adjacent values of one row), summed per phase and
// then over the phases in order; with inner > 1 (a convolution's [N][C][HW]) each channel is one
// block: per-thread sums along the contiguous runs, then a fixed shared-memory tree. Every sum
// runs in a fixed order: repeated runs give the same bits.
#include "kernels/activation_kernels.hpp"
#include "kernels/launch.cuh"
#include "check/cuda_check.hpp"
#include "ringtrain/nn/gelu_rule.hpp"

namespace ringtrain::kernels {
namespace {

using namespace detail;

// The element-wise ops, for launch_map (16-byte accesses where aligned).
template <typename T>
struct ReluOp {  // max(x, 0); NaN passes, -0 becomes +0, as the CPU layer and cuBLASLt's epilogue
  static constexpr int kInputs = 1;
  __device__ T operator()(T x) const {
    const float v = to_float(x);
    return from_float<T>(!(v <= 0.0f) ? v : 0.0f);
  }
};

template <typename T>
struct ReluGradOp {  // (y, dy) -> y > 0 ? dy : 0
  static constexpr int kInputs = 2;
  __device__ T operator()(T y, T dy) const { return to_float(y) > 0.0f ? dy : from_float<T>(0.0f); }
};

// GELU (tanh form) from the rule the CPU layer uses; expf for its exp.
template <typename T>
struct GeluOp {
  static constexpr int kInputs = 1;
  __device__ T operator()(T x) const {
    const float v = to_float(x);
    const float u = gelu_u(v);
    return from_float<T>(gelu_value(v, u, expf(-2.0f * fabsf(u))));
  }
};

template <typename T>
struct GeluGradOp {  // (x, dy) -> dy * gelu'(x)
  static constexpr int kInputs = 2;
  __device__ T operator()(T x, T dy) const {
    const float v = to_float(x);
    const float u = gelu_u(v);
    return from_float<T>(to_float(dy) * gelu_slope(v, u, expf(-2.0f * fabsf(u))));
  }
};

// In place over [rows][width]: y = act(y + bias), the bias (of type B: f32 or T) indexed by the
// column (kPerColumn: a
// Linear's [N][C]) or by row % channels (a convolution's [N*C][HW] planes, the channel advanced
// with the row instead of divided out of it).
template <typename T, typename B, bool kRelu, bool kPerColumn>
__global__ void bias_act_2d_kernel(T* y, const B* bias, std::int64_t rows, std::int64_t width, std::int64_t channels) {
  const std::int64_t col = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (col >= width) return;
  std::int64_t channel = blockIdx.y % channels;
  const std::int64_t channel_step = gridDim.y % channels;
  for (std::int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    T& out = y[r * width + col];
    float v = to_float(out) + to_float(bias[kPerColumn ? col : channel]);
    if constexpr (kRelu) v = !(v <= 0.0f) ? v : 0.0f;
    out = from_float<T>(v);
    channel += channel_step;
    if (channel >= channels) channel -= channels;
  }
}

template <typename T, typename B, bool kRelu, bool kPerColumn>
void launch_bias_act_2d(T* y, const B* bias, std::int64_t rows, std::int64_t width, std::int64_t channels,
                        void* stream) {
  bias_act_2d_kernel<T, B, kRelu, kPerColumn>
      <<<column_row_grid(width, rows), kThreads, 0, as_stream(stream)>>>(y, bias, rows, width, channels);
  check_launch("bias_act_2d_kernel");
}

// [rows][channels] (inner == 1): 32 channels per block, 8 row phases; warp k of the block sums
// rows k, k + 8, ... of its 32 channels (coalesced), then phase 0 adds the 8 sums in order.
template <typename T>
__global__ void bias_grad_columns_kernel(float* db, const T* dy, std::int64_t rows, std::int64_t channels) {
  constexpr int kColumns = 32, kPhases = kThreads / kColumns;
  __shared__ float partial[kPhases][kColumns + 1];
  const int lane = static_cast<int>(threadIdx.x % kColumns), phase = static_cast<int>(threadIdx.x / kColumns);
  for (std::int64_t tile = blockIdx.x; tile * kColumns < channels; tile += gridDim.x) {
    const std::int64_t c = tile * kColumns + lane;
    float acc = 0.0f;
    if (c < channels)
      for (std::int64_t r = phase; r < rows; r += kPhases) acc += to_float(dy[r * channels + c]);
    partial[phase][lane] = acc;
    __syncthreads();
    if (phase == 0 && c < channels) {
      float sum = 0.0f;
      for (int k = 0; k < kPhases; ++k) sum += partial[k][lane];
      db[c] = sum;
    }
    __syncthreads();  // partial is reused by the next tile
  }
}

// [outer][channels][inner], inner > 1: one block per channel; the threads walk the channel's
// outer x inner elements in steps of blockDim, (o, i) advanced without dividing.
template <typename T>
__global__ void bias_grad_planes_kernel(float* db, const T* dy, std::int64_t outer, std::int64_t channels,
                                        std::int64_t inner) {
  __shared__ float partial[kThreads];
  for (std::int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    float acc = 0.0f;
    std::int64_t o = threadIdx.x / inner, i = threadIdx.x % inner;
    const std::int64_t step_o = blockDim.x / inner, step_i = blockDim.x % inner;
    while (o < outer) {
      acc += to_float(dy[(o * channels + c) * inner + i]);
      o += step_o;
      i += step_i;
      if (i >= inner) {
        i -= inner;
        ++o;
      }
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
      __syncthreads();
    }
    if (threadIdx.x == 0) db[c] = partial[0];
    __syncthreads();  // partial is reused by the next channel
  }
}

void require_shape(const char* name, std::int64_t outer, std::int64_t channels, std::int64_t inner) {
  RT_REQUIRE(outer >= 0 && channels >= 0 && inner >= 0, Error, "{}: negative extent in [{}, {}, {}]", name, outer,
             channels, inner);
}

// The bias as B, for launch_bias_act_2d's two layouts.
template <typename T, typename B>
void launch_bias_act(T* out, const B* bias, std::int64_t outer, std::int64_t channels, std::int64_t inner, bool relu,
                     void* stream) {
  if (inner == 1) {  // [outer][channels]: the bias by column
    if (relu)
      launch_bias_act_2d<T, B, true, true>(out, bias, outer, channels, channels, stream);
    else
      launch_bias_act_2d<T, B, false, true>(out, bias, outer, channels, channels, stream);
  } else {  // [outer * channels][inner] planes: the bias by plane
    if (relu)
      launch_bias_act_2d<T, B, true, false>(out, bias, outer * channels, inner, channels, stream);
    else
      launch_bias_act_2d<T, B, false, false>(out, bias, outer * channels, inner, channels, stream);
  }
}

}  // namespace

void launch_bias_act_forward(void* y, const void* bias, DType bias_dtype, std::int64_t outer, std::int64_t channels,
                             std::int64_t inner, Activation act, DType dtype, void* stream) {
  require_shape("bias_act_forward", outer, channels, inner);
  RT_REQUIRE(bias_dtype == DType::f32 || bias_dtype == dtype, Error,
             "bias_act_forward: a {} bias for {} values (f32 or the values' dtype)", dtype_name(bias_dtype),
             dtype_name(dtype));
  dispatch_float(dtype, "bias_act_forward", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t n = outer * channels * inner;
    auto* out = static_cast<T*>(y);
    const bool relu = act == Activation::relu;
    if (n == 0 || (bias == nullptr && !relu)) return;
    if (bias == nullptr)
      launch_map("relu_kernel", ReluOp<T>{}, out, static_cast<const T*>(out), static_cast<const T*>(nullptr), n,
                 stream);
    else if (bias_dtype == DType::f32)
      launch_bias_act(out, static_cast<const float*>(bias), outer, channels, inner, relu, stream);
    else
      launch_bias_act(out, static_cast<const T*>(bias), outer, channels, inner, relu, stream);
  });
}

void launch_relu_forward(void* y, const void* x, std::int64_t n, DType dtype, void* stream) {
  dispatch_float(dtype, "relu_forward", [&](auto tag) {
    using T = decltype(tag);
    launch_map("relu_forward_kernel", ReluOp<T>{}, static_cast<T*>(y), static_cast<const T*>(x),
               static_cast<const T*>(nullptr), n, stream);
  });
}

void launch_relu_backward(void* dx, const void* y, const void* dy, std::int64_t n, DType dtype, void* stream) {
  dispatch_float(dtype, "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    launch_map("relu_backward_kernel", ReluGradOp<T>{}, static_cast<T*>(dx), static_cast<const T*>(y),
               static_cast<const T*>(dy), n, stream);
  });
}

void launch_gelu_forward(void* y, const void* x, std::int64_t n, DType dtype, void* stream) {
  dispatch_float(dtype, "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    launch_map("gelu_forward_kernel", GeluOp<T>{}, static_cast<T*>(y), static_cast<const T*>(x),
               static_cast<const T*>(nullptr), n, stream);
  });
}

void launch_gelu_backward(void* dx, const void* x, const void* dy, std::int64_t n, DType dtype, void* stream) {
  dispatch_float(dtype, "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    launch_map("gelu_backward_kernel", GeluGradOp<T>{}, static_cast<T*>(dx), static_cast<const T*>(x),
               static_cast<const T*>(dy), n, stream);
  });
}

void launch_bias_grad(float* db, const void* dy, std::int64_t outer, std::int64_t channels, std::int64_t inner,
                      DType dtype, void* stream) {
  require_shape("bias_grad", outer, channels, inner);
  dispatch_float(dtype, "bias_grad", [&](auto tag) {
    using T = decltype(tag);
    if (channels == 0) return;
    if (outer * inner == 0) {
      RT_CUDA_CHECK(cudaMemsetAsync(db, 0, static_cast<std::size_t>(channels) * sizeof(float), as_stream(stream)));
      return;
    }
    const auto* g = static_cast<const T*>(dy);
    if (inner == 1) {
      const std::int64_t tiles = (channels + 31) / 32;
      const auto blocks = static_cast<unsigned>(tiles < kMaxBlocks ? tiles : kMaxBlocks);
      bias_grad_columns_kernel<T><<<blocks, kThreads, 0, as_stream(stream)>>>(db, g, outer, channels);
      check_launch("bias_grad_columns_kernel");
      return;
    }
    const auto blocks = static_cast<unsigned>(channels < kMaxBlocks ? channels : kMaxBlocks);
    bias_grad_planes_kernel<T><<<blocks, kThreads, 0, as_stream(stream)>>>(db, g, outer, channels, inner);
    check_launch("bias_grad_planes_kernel");
  });
}

}  // namespace ringtrain::kernels
