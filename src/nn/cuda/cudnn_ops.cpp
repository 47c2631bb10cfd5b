// cuDNN convolution, max pooling and batch norm (see cudnn_ops.hpp). Scaling factors are f32
// for every data type here (cuDNN wants double only for double data); beta = 0 everywhere,
// so outputs are overwritten and never read.
#include "nn/cuda/cudnn_ops.hpp"

#include <algorithm>
#include <climits>
#include <string>
#include <string_view>
#include <vector>

#include "check/cudnn_check.hpp"

namespace ringtrain::cuda {
namespace {

constexpr float kOne = 1.0f;
constexpr float kZero = 0.0f;

cudnnDataType_t cudnn_type(DType t, std::string_view op) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    case DType::f16: return CUDNN_DATA_HALF;
    default: break;
  }
  throw Error(fmt::format("{}: unsupported element type {} on CUDA (f32, bf16 or f16)", op, dtype_name(t)));
}

// cuDNN's 4-d descriptors take int dimensions and strides, so a whole tensor must fit in int.
int to_int(std::int64_t v, std::string_view op, std::string_view what) {
  RT_REQUIRE(v >= 0 && v <= INT_MAX, Error, "{}: {} = {} does not fit cuDNN's int", op, what, v);
  return static_cast<int>(v);
}

TensorDesc make_tensor_desc(cudnnDataType_t type, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                            std::string_view op) {
  to_int(n * c * h * w, op, "tensor size");
  cudnnTensorDescriptor_t desc = nullptr;
  RT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc));
  TensorDesc owned(desc);
  RT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, type, to_int(n, op, "n"), to_int(c, op, "c"),
                                            to_int(h, op, "h"), to_int(w, op, "w")));
  return owned;
}

std::string describe(const ConvGeometry& g, DType dtype, MathMode math) {
  return fmt::format("conv2d [{}, {}, {}, {}] -> {} channels, kernel {}, stride {}, padding {}, {}{}", g.n, g.c, g.h,
                     g.w, g.out_channels, g.kernel, g.stride, g.padding, dtype_name(dtype),
                     dtype == DType::f32 && math == MathMode::strict_f32 ? " (strict, no tensor cores)" : "");
}

// The first algorithm the heuristic offers that runs with the descriptor's math type and
// whose workspace fits the bound, a deterministic one if any fits (runs repeat bitwise; some
// backward algorithms sum with atomics). Strict f32 keeps the descriptor at CUDNN_FMA_MATH
// whatever an entry says (an algorithm without an FMA kernel then fails the workspace query
// and is skipped); otherwise the descriptor takes the entry's math type, as cuDNN asks.
template <typename Perf, typename WorkspaceSize>
auto choose_algorithm(const std::vector<Perf>& offered, cudnnConvolutionDescriptor_t conv, bool strict_f32,
                      std::size_t bound, WorkspaceSize workspace_size, std::string_view direction,
                      const std::string& problem, std::size_t* bytes) {
  for (const bool deterministic_only : {true, false})
    for (const Perf& p : offered) {
      if (p.status != CUDNN_STATUS_SUCCESS) continue;
      if (deterministic_only && p.determinism != CUDNN_DETERMINISTIC) continue;
      if (!strict_f32) RT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, p.mathType));
      std::size_t need = 0;
      if (workspace_size(p.algo, &need) != CUDNN_STATUS_SUCCESS || need > bound) continue;
      *bytes = need;
      return p.algo;
    }
  throw Error(fmt::format("cuDNN offers no {} algorithm for {} within {} bytes of workspace ({} candidates)", direction,
                          problem, bound, offered.size()));
}

cudnnHandle_t create_cudnn() {
  cudnnHandle_t handle = nullptr;
  RT_CUDNN_CHECK(cudnnCreate(&handle));
  return handle;
}

}  // namespace

// ---- Cudnn --------------------------------------------------------------------------------

Cudnn::Cudnn() : handle_(create_cudnn()) {}

cudnnHandle_t Cudnn::on(void* stream) const {
  RT_CUDNN_CHECK(cudnnSetStream(handle_.get(), static_cast<cudaStream_t>(stream)));
  return handle_.get();
}

// ---- ConvOp -------------------------------------------------------------------------------

ConvOp::ConvOp(Cudnn& dnn, const ConvGeometry& g, DType dtype, MathMode math, std::size_t max_workspace_bytes)
    : dnn_(dnn) {
  constexpr std::string_view op = "conv2d";
  RT_REQUIRE(
      g.n > 0 && g.c > 0 && g.h > 0 && g.w > 0 && g.out_channels > 0 && g.kernel > 0 && g.stride > 0 && g.padding >= 0,
      Error, "conv2d: invalid geometry n={} c={} h={} w={} out_channels={} kernel={} stride={} padding={}", g.n, g.c,
      g.h, g.w, g.out_channels, g.kernel, g.stride, g.padding);
  const cudnnDataType_t type = cudnn_type(dtype, op);
  const bool strict_f32 = dtype == DType::f32 && math == MathMode::strict_f32;
  const std::string problem = describe(g, dtype, math);

  out_h_ = (g.h + 2 * g.padding - g.kernel) / g.stride + 1;
  out_w_ = (g.w + 2 * g.padding - g.kernel) / g.stride + 1;
  RT_REQUIRE(g.h + 2 * g.padding >= g.kernel && g.w + 2 * g.padding >= g.kernel, Error,
             "{}: the kernel does not fit the padded input", problem);
  x_desc_ = make_tensor_desc(type, g.n, g.c, g.h, g.w, op);
  y_desc_ = make_tensor_desc(type, g.n, g.out_channels, out_h_, out_w_, op);
  cudnnFilterDescriptor_t w_desc = nullptr;
  RT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_desc));
  w_desc_.reset(w_desc);
  RT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_desc, type, CUDNN_TENSOR_NCHW, to_int(g.out_channels, op, "out_channels"),
                                            to_int(g.c, op, "c"), to_int(g.kernel, op, "kernel"),
                                            to_int(g.kernel, op, "kernel")));

  const int pad = to_int(g.padding, op, "padding"), stride = to_int(g.stride, op, "stride");
  const auto make_conv_desc = [&]() {
    cudnnConvolutionDescriptor_t desc = nullptr;
    RT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc));
    ConvDesc owned(desc);
    RT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(desc, pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT));
    RT_CUDNN_CHECK(cudnnSetConvolutionMathType(desc, strict_f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
    return owned;
  };
  fwd_desc_ = make_conv_desc();
  bwd_data_desc_ = make_conv_desc();
  bwd_filter_desc_ = make_conv_desc();

  int n = 0, c = 0, h = 0, w = 0;  // cuDNN's own output shape must be the CPU layer's
  RT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(fwd_desc_.get(), x_desc_.get(), w_desc, &n, &c, &h, &w));
  RT_REQUIRE(n == g.n && c == g.out_channels && h == out_h_ && w == out_w_, Error,
             "{}: cuDNN's output shape [{}, {}, {}, {}] differs from [{}, {}, {}, {}]", problem, n, c, h, w, g.n,
             g.out_channels, out_h_, out_w_);

  const cudnnHandle_t handle = dnn_.get();
  std::size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;
  {
    int count = 0;
    RT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &count));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<std::size_t>(count));
    RT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, x_desc_.get(), w_desc, fwd_desc_.get(), y_desc_.get(),
                                                          count, &count, perf.data()));
    perf.resize(static_cast<std::size_t>(count));
    fwd_algo_ = choose_algorithm(
        perf, fwd_desc_.get(), strict_f32, max_workspace_bytes,
        [&](cudnnConvolutionFwdAlgo_t algo, std::size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(handle, x_desc_.get(), w_desc, fwd_desc_.get(), y_desc_.get(),
                                                         algo, bytes);
        },
        "forward", problem, &fwd_bytes);
  }
  {
    int count = 0;
    RT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &count));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<std::size_t>(count));
    RT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, w_desc, y_desc_.get(), bwd_data_desc_.get(),
                                                               x_desc_.get(), count, &count, perf.data()));
    perf.resize(static_cast<std::size_t>(count));
    bwd_data_algo_ = choose_algorithm(
        perf, bwd_data_desc_.get(), strict_f32, max_workspace_bytes,
        [&](cudnnConvolutionBwdDataAlgo_t algo, std::size_t* bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, w_desc, y_desc_.get(), bwd_data_desc_.get(),
                                                              x_desc_.get(), algo, bytes);
        },
        "backward-data", problem, &bwd_data_bytes);
  }
  {
    int count = 0;
    RT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &count));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<std::size_t>(count));
    RT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        handle, x_desc_.get(), y_desc_.get(), bwd_filter_desc_.get(), w_desc, count, &count, perf.data()));
    perf.resize(static_cast<std::size_t>(count));
    bwd_filter_algo_ = choose_algorithm(
        perf, bwd_filter_desc_.get(), strict_f32, max_workspace_bytes,
        [&](cudnnConvolutionBwdFilterAlgo_t algo, std::size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, x_desc_.get(), y_desc_.get(),
                                                                bwd_filter_desc_.get(), w_desc, algo, bytes);
        },
        "backward-filter", problem, &bwd_filter_bytes);
  }
  workspace_bytes_ = std::max({fwd_bytes, bwd_data_bytes, bwd_filter_bytes});
  dnn_.workspace().get(workspace_bytes_);  // grown now, outside any graph capture
}

void ConvOp::forward(const void* x, const void* w, void* y, void* stream) {
  RT_CUDNN_CHECK(cudnnConvolutionForward(dnn_.on(stream), &kOne, x_desc_.get(), x, w_desc_.get(), w, fwd_desc_.get(),
                                         fwd_algo_, dnn_.workspace().get(workspace_bytes_), workspace_bytes_, &kZero,
                                         y_desc_.get(), y));
}

void ConvOp::backward_data(const void* w, const void* dy, void* dx, void* stream) {
  RT_CUDNN_CHECK(cudnnConvolutionBackwardData(
      dnn_.on(stream), &kOne, w_desc_.get(), w, y_desc_.get(), dy, bwd_data_desc_.get(), bwd_data_algo_,
      dnn_.workspace().get(workspace_bytes_), workspace_bytes_, &kZero, x_desc_.get(), dx));
}

void ConvOp::backward_filter(const void* x, const void* dy, void* dw, void* stream) {
  RT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
      dnn_.on(stream), &kOne, x_desc_.get(), x, y_desc_.get(), dy, bwd_filter_desc_.get(), bwd_filter_algo_,
      dnn_.workspace().get(workspace_bytes_), workspace_bytes_, &kZero, w_desc_.get(), dw));
}

// ---- MaxPoolOp ----------------------------------------------------------------------------

MaxPoolOp::MaxPoolOp(Cudnn& dnn, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t kernel,
                     std::int64_t stride, DType dtype)
    : dnn_(dnn) {
  constexpr std::string_view op = "maxpool2d";
  RT_REQUIRE(n > 0 && c > 0 && kernel > 0 && stride > 0 && h >= kernel && w >= kernel, Error,
             "maxpool2d: invalid shape [{}, {}, {}, {}] for kernel {} stride {}", n, c, h, w, kernel, stride);
  const cudnnDataType_t type = cudnn_type(dtype, op);
  out_h_ = (h - kernel) / stride + 1;
  out_w_ = (w - kernel) / stride + 1;
  x_desc_ = make_tensor_desc(type, n, c, h, w, op);
  y_desc_ = make_tensor_desc(type, n, c, out_h_, out_w_, op);
  cudnnPoolingDescriptor_t desc = nullptr;
  RT_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&desc));
  pool_desc_.reset(desc);
  // The deterministic variant: the same gradients on every run (ringtrain's runs are reproducible).
  const int k = to_int(kernel, op, "kernel"), s = to_int(stride, op, "stride");
  RT_CUDNN_CHECK(
      cudnnSetPooling2dDescriptor(desc, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_PROPAGATE_NAN, k, k, 0, 0, s, s));
}

void MaxPoolOp::forward(const void* x, void* y, void* stream) {
  RT_CUDNN_CHECK(
      cudnnPoolingForward(dnn_.on(stream), pool_desc_.get(), &kOne, x_desc_.get(), x, &kZero, y_desc_.get(), y));
}

void MaxPoolOp::backward(const void* x, const void* y, const void* dy, void* dx, void* stream) {
  RT_CUDNN_CHECK(cudnnPoolingBackward(dnn_.on(stream), pool_desc_.get(), &kOne, y_desc_.get(), y, y_desc_.get(), dy,
                                      x_desc_.get(), x, &kZero, x_desc_.get(), dx));
}

// ---- BatchNormOp --------------------------------------------------------------------------

BatchNormOp::BatchNormOp(Cudnn& dnn, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, DType dtype,
                         double eps, double momentum)
    : dnn_(dnn), eps_(eps), momentum_(momentum) {
  constexpr std::string_view op = "batchnorm2d";
  RT_REQUIRE(n > 0 && c > 0 && h > 0 && w > 0, Error, "batchnorm2d: invalid shape [{}, {}, {}, {}]", n, c, h, w);
  RT_REQUIRE(eps > 0.0 && eps >= CUDNN_BN_MIN_EPSILON, Error, "batchnorm2d: eps must be > 0 and >= {}, got {}",
             CUDNN_BN_MIN_EPSILON, eps);
  RT_REQUIRE(momentum >= 0.0 && momentum <= 1.0, Error, "batchnorm2d: momentum must be in [0, 1], got {}", momentum);
  RT_REQUIRE(dtype != DType::bf16, Error,
             "batchnorm2d: cuDNN's batch norm does not take bf16 activations (f32 or f16 only); "
             "keep batch norm in f32 or f16");
  x_desc_ = make_tensor_desc(cudnn_type(dtype, op), n, c, h, w, op);
  cudnnTensorDescriptor_t desc = nullptr;
  RT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc));
  param_desc_.reset(desc);
  RT_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(desc, x_desc_.get(), CUDNN_BATCHNORM_SPATIAL));  // f32 [1, C, 1, 1]
}

// cuDNN's running update is running = (1 - factor) * running + factor * batch with the
// unbiased variance: the CPU layer's convention with factor = momentum.
void BatchNormOp::forward_training(const void* x, void* y, const float* gamma, const float* beta, float* running_mean,
                                   float* running_var, float* save_mean, float* save_inv_std, void* stream) {
  RT_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      dnn_.on(stream), CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, x_desc_.get(), x, x_desc_.get(), y, param_desc_.get(),
      gamma, beta, momentum_, running_mean, running_var, eps_, save_mean, save_inv_std));
}

void BatchNormOp::forward_inference(const void* x, void* y, const float* gamma, const float* beta,
                                    const float* running_mean, const float* running_var, void* stream) {
  RT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(dnn_.on(stream), CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero,
                                                         x_desc_.get(), x, x_desc_.get(), y, param_desc_.get(), gamma,
                                                         beta, running_mean, running_var, eps_));
}

void BatchNormOp::backward(const void* x, const void* dy, void* dx, const float* gamma, float* dgamma, float* dbeta,
                           const float* save_mean, const float* save_inv_std, void* stream) {
  RT_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      dnn_.on(stream), CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, &kOne, &kZero, x_desc_.get(), x, x_desc_.get(), dy,
      x_desc_.get(), dx, param_desc_.get(), gamma, dgamma, dbeta, eps_, save_mean, save_inv_std));
}

}  // namespace ringtrain::cuda
