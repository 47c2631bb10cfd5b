// Bias + activation forward, ReLU and GELU forward/backward and bias gradient. The bias gradient
// reduces each channel in one block: per-thread strided sums, then a fixed shared-memory tree.
#include "kernels/activation_kernels.hpp"
#include "kernels/launch.cuh"
#include "check/cuda_check.hpp"
#include "ringtrain/nn/gelu_rule.hpp"

namespace ringtrain::kernels {
namespace {

using namespace detail;

// y = act(x + bias[c]) over [n / (channels * inner)][channels][inner]; y may alias x.
template <typename T, bool kRelu>
__global__ void bias_act_kernel(T* y, const T* x, const float* bias, std::int64_t n, std::int64_t channels,
                                std::int64_t inner) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    float v = to_float(x[i]);
    if (bias != nullptr) v += bias[(i / inner) % channels];
    if constexpr (kRelu) v = v > 0.0f ? v : 0.0f;
    y[i] = from_float<T>(v);
  }
}

template <typename T>
__global__ void relu_backward_kernel(T* dx, const T* y, const T* dy, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    dx[i] = to_float(y[i]) > 0.0f ? dy[i] : from_float<T>(0.0f);
}

// GELU (tanh form) from the rule the CPU layer uses; expf for its exp.
template <typename T>
__global__ void gelu_forward_kernel(T* y, const T* x, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    const float v = to_float(x[i]);
    const float u = gelu_u(v);
    y[i] = from_float<T>(gelu_value(v, u, expf(-2.0f * fabsf(u))));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(T* dx, const T* x, const T* dy, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    const float v = to_float(x[i]);
    const float u = gelu_u(v);
    dx[i] = from_float<T>(to_float(dy[i]) * gelu_slope(v, u, expf(-2.0f * fabsf(u))));
  }
}

template <typename T>
__global__ void bias_grad_kernel(float* db, const T* dy, std::int64_t outer, std::int64_t channels,
                                 std::int64_t inner) {
  __shared__ float partial[kThreads];
  const std::int64_t per_channel = outer * inner;
  for (std::int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    float acc = 0.0f;
    for (std::int64_t j = threadIdx.x; j < per_channel; j += blockDim.x) {
      const std::int64_t o = j / inner;
      acc += to_float(dy[(o * channels + c) * inner + (j - o * inner)]);
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

}  // namespace

void launch_bias_act_forward(void* y, const float* bias, std::int64_t outer, std::int64_t channels, std::int64_t inner,
                             Activation act, DType dtype, void* stream) {
  require_shape("bias_act_forward", outer, channels, inner);
  dispatch_float(dtype, "bias_act_forward", [&](auto tag) {
    using T = decltype(tag);
    if (bias == nullptr && act == Activation::none) return;
    const std::int64_t n = outer * channels * inner;
    auto* out = static_cast<T*>(y);
    if (act == Activation::relu)
      launch_elementwise(bias_act_kernel<T, true>, "bias_act_kernel", n, stream, out, out, bias, n, channels, inner);
    else
      launch_elementwise(bias_act_kernel<T, false>, "bias_act_kernel", n, stream, out, out, bias, n, channels, inner);
  });
}

void launch_relu_forward(void* y, const void* x, std::int64_t n, DType dtype, void* stream) {
  dispatch_float(dtype, "relu_forward", [&](auto tag) {
    using T = decltype(tag);
    launch_elementwise(bias_act_kernel<T, true>, "relu_forward_kernel", n, stream, static_cast<T*>(y),
                       static_cast<const T*>(x), static_cast<const float*>(nullptr), n, std::int64_t{1},
                       std::int64_t{1});
  });
}

void launch_relu_backward(void* dx, const void* y, const void* dy, std::int64_t n, DType dtype, void* stream) {
  dispatch_float(dtype, "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    launch_elementwise(relu_backward_kernel<T>, "relu_backward_kernel", n, stream, static_cast<T*>(dx),
                       static_cast<const T*>(y), static_cast<const T*>(dy), n);
  });
}

void launch_gelu_forward(void* y, const void* x, std::int64_t n, DType dtype, void* stream) {
  dispatch_float(dtype, "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    launch_elementwise(gelu_forward_kernel<T>, "gelu_forward_kernel", n, stream, static_cast<T*>(y),
                       static_cast<const T*>(x), n);
  });
}

void launch_gelu_backward(void* dx, const void* x, const void* dy, std::int64_t n, DType dtype, void* stream) {
  dispatch_float(dtype, "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    launch_elementwise(gelu_backward_kernel<T>, "gelu_backward_kernel", n, stream, static_cast<T*>(dx),
                       static_cast<const T*>(x), static_cast<const T*>(dy), n);
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
    const auto blocks = static_cast<unsigned>(channels < kMaxBlocks ? channels : kMaxBlocks);
    bias_grad_kernel<T>
        <<<blocks, kThreads, 0, as_stream(stream)>>>(db, static_cast<const T*>(dy), outer, channels, inner);
    check_launch("bias_grad_kernel");
  });
}

}  // namespace ringtrain::kernels
