// cuDNN convolution, max pooling and batch norm against the CPU layers (Conv2d without bias,
// MaxPool2d, BatchNorm2d) on random inputs, with NaN-poisoned outputs, for f32 (strict and
// tf32) and bf16/f16 where cuDNN supports them. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda/nn/cuda_nn_testing.hpp"
#include "nn/cuda/cudnn_ops.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain {
namespace {

using cuda::ConvGeometry;
using cuda::Cudnn;
using cuda::MathMode;
using test::DeviceBuffer;

struct TypeCase {
  DType dtype;
  MathMode math;
};

std::string type_name(const ::testing::TestParamInfo<TypeCase>& info) {
  return std::string(dtype_name(info.param.dtype)) + (info.param.math == MathMode::tf32 ? "_tf32" : "");
}

std::size_t count(const Shape& s) { return static_cast<std::size_t>(s.numel()); }

// ---- convolution --------------------------------------------------------------------------

constexpr ConvGeometry kConvCases[] = {
    {3, 5, 11, 9, 7, 3, 1, 1},   // odd sizes, same padding
    {2, 4, 12, 13, 6, 5, 2, 2},  // stride 2, large kernel
    {4, 3, 8, 8, 8, 1, 1, 0},    // 1x1
    {2, 16, 7, 7, 32, 3, 1, 0},  // more channels, no padding
};

class CudnnConv : public ::testing::TestWithParam<TypeCase> {};

TEST_P(CudnnConv, MatchesCpuConv2d) {
  RT_SKIP_WITHOUT_GPU();
  const auto [dtype, math] = GetParam();
  const double tol = test::tolerance(dtype, math);
  Cudnn dnn;
  std::uint64_t seed = 10;
  for (const ConvGeometry& g : kConvCases) {
    SCOPED_TRACE(::testing::Message() << "conv n=" << g.n << " c=" << g.c << " h=" << g.h << " w=" << g.w
                                      << " out=" << g.out_channels << " k=" << g.kernel << " s=" << g.stride
                                      << " p=" << g.padding);
    Conv2dOptions o;
    o.out_channels = g.out_channels;
    o.kernel = g.kernel;
    o.stride = g.stride;
    o.padding = g.padding;
    o.bias = false;
    Conv2d cpu(o);
    const Shape x_shape{g.n, g.c, g.h, g.w};
    const Shape y_shape = cpu.configure(x_shape.sample()).with_batch(g.n);
    const Shape w_shape{g.out_channels, g.c, g.kernel, g.kernel};
    auto x = test::random_values(count(x_shape), seed++, dtype);
    auto w = test::random_values(count(w_shape), seed++, dtype, 0.5f);
    auto dy = test::random_values(count(y_shape), seed++, dtype);
    std::vector<float> y(count(y_shape)), dx(count(x_shape)), dw(count(w_shape));
    cpu.bind({Tensor::wrap(w.data(), w_shape)}, {Tensor::wrap(dw.data(), w_shape)});
    const Tensor xt = Tensor::wrap(x.data(), x_shape), dyt = Tensor::wrap(dy.data(), y_shape);
    Tensor yt = Tensor::wrap(y.data(), y_shape), dxt = Tensor::wrap(dx.data(), x_shape);
    cpu.forward(xt, yt, StepInfo{});
    cpu.backward(xt, yt, dyt, &dxt);

    cuda::ConvOp op(dnn, g, dtype, math);
    EXPECT_EQ(op.out_h(), y_shape[2]);
    EXPECT_EQ(op.out_w(), y_shape[3]);
    const auto d_x = DeviceBuffer::of_values(x, dtype), d_w = DeviceBuffer::of_values(w, dtype),
               d_dy = DeviceBuffer::of_values(dy, dtype);
    const DeviceBuffer d_y(y.size() * dtype_size(dtype)), d_dx(dx.size() * dtype_size(dtype)),
        d_dw(dw.size() * dtype_size(dtype));
    op.forward(d_x.get(), d_w.get(), d_y.get(), nullptr);
    op.backward_data(d_w.get(), d_dy.get(), d_dx.get(), nullptr);
    op.backward_filter(d_x.get(), d_dy.get(), d_dw.get(), nullptr);
    EXPECT_LT(test::max_rel_error(d_y.read_values(dtype), test::round_to(dtype, y)), tol) << "forward";
    EXPECT_LT(test::max_rel_error(d_dx.read_values(dtype), test::round_to(dtype, dx)), tol) << "backward_data";
    EXPECT_LT(test::max_rel_error(d_dw.read_values(dtype), test::round_to(dtype, dw)), tol) << "backward_filter";
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudnnConv,
                         ::testing::Values(TypeCase{DType::f32, MathMode::strict_f32},
                                           TypeCase{DType::f32, MathMode::tf32},
                                           TypeCase{DType::bf16, MathMode::strict_f32},
                                           TypeCase{DType::f16, MathMode::strict_f32}),
                         type_name);

// ---- max pooling --------------------------------------------------------------------------

struct PoolCase {
  std::int64_t n, c, h, w, kernel, stride;
};

constexpr PoolCase kPoolCases[] = {
    {2, 3, 9, 11, 2, 2},   // odd sizes: the last row/column is dropped, as on the CPU
    {2, 4, 10, 10, 3, 2},  // overlapping windows: gradients add up
    {1, 2, 7, 7, 3, 1},
};

class CudnnMaxPool : public ::testing::TestWithParam<TypeCase> {};

// Inputs are pairwise distinct, so the arg-max is unique and CPU and cuDNN must agree exactly
// on the forward values; tie-breaking between equal maxima is not tested (it may differ).
TEST_P(CudnnMaxPool, MatchesCpuMaxPool2d) {
  RT_SKIP_WITHOUT_GPU();
  const DType dtype = GetParam().dtype;
  Cudnn dnn;
  std::uint64_t seed = 20;
  for (const PoolCase& p : kPoolCases) {
    SCOPED_TRACE(::testing::Message() << "pool n=" << p.n << " c=" << p.c << " h=" << p.h << " w=" << p.w
                                      << " k=" << p.kernel << " s=" << p.stride);
    MaxPool2d cpu(p.kernel, p.stride);
    const Shape x_shape{p.n, p.c, p.h, p.w};
    const Shape y_shape = cpu.configure(x_shape.sample()).with_batch(p.n);
    auto x = test::distinct_values(count(x_shape), seed++);
    auto dy = test::random_values(count(y_shape), seed++, dtype);
    std::vector<float> y(count(y_shape)), dx(count(x_shape));
    const Tensor xt = Tensor::wrap(x.data(), x_shape), dyt = Tensor::wrap(dy.data(), y_shape);
    Tensor yt = Tensor::wrap(y.data(), y_shape), dxt = Tensor::wrap(dx.data(), x_shape);
    cpu.forward(xt, yt, StepInfo{});
    cpu.backward(xt, yt, dyt, &dxt);

    cuda::MaxPoolOp op(dnn, p.n, p.c, p.h, p.w, p.kernel, p.stride, dtype);
    EXPECT_EQ(op.out_h(), y_shape[2]);
    EXPECT_EQ(op.out_w(), y_shape[3]);
    const auto d_x = DeviceBuffer::of_values(x, dtype), d_dy = DeviceBuffer::of_values(dy, dtype);
    const DeviceBuffer d_y(y.size() * dtype_size(dtype)), d_dx(dx.size() * dtype_size(dtype));
    op.forward(d_x.get(), d_y.get(), nullptr);
    op.backward(d_x.get(), d_y.get(), d_dy.get(), d_dx.get(), nullptr);
    EXPECT_EQ(d_y.read_values(dtype), y) << "forward";
    EXPECT_LT(test::max_rel_error(d_dx.read_values(dtype), test::round_to(dtype, dx)),
              test::tolerance(dtype, GetParam().math))
        << "backward";
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudnnMaxPool,
                         ::testing::Values(TypeCase{DType::f32, MathMode::strict_f32},
                                           TypeCase{DType::bf16, MathMode::strict_f32},
                                           TypeCase{DType::f16, MathMode::strict_f32}),
                         type_name);

// ---- batch norm ---------------------------------------------------------------------------

struct BnCase {
  std::int64_t n, c, h, w;
};

constexpr BnCase kBnCases[] = {{4, 3, 5, 7}, {8, 16, 4, 4}, {2, 5, 1, 1}};
constexpr double kMomentum = 0.1, kEps = 1e-5;

class CudnnBatchNorm : public ::testing::TestWithParam<TypeCase> {};

TEST_P(CudnnBatchNorm, MatchesCpuBatchNorm2d) {
  RT_SKIP_WITHOUT_GPU();
  const DType dtype = GetParam().dtype;
  const double tol = test::tolerance(dtype, GetParam().math);
  Cudnn dnn;
  std::uint64_t seed = 30;
  for (const BnCase& b : kBnCases) {
    SCOPED_TRACE(::testing::Message() << "batchnorm n=" << b.n << " c=" << b.c << " h=" << b.h << " w=" << b.w);
    BatchNorm2d cpu(kMomentum, kEps);
    const Shape x_shape{b.n, b.c, b.h, b.w}, c_shape{b.c};
    cpu.configure(x_shape.sample());
    const std::size_t nc = static_cast<std::size_t>(b.c), hw = static_cast<std::size_t>(b.h * b.w);
    auto x = test::random_values(count(x_shape), seed++, DType::f32, 2.0f);
    for (std::size_t i = 0; i < x.size(); ++i)  // a different mean per channel
      x[i] = test::round_to(dtype, x[i] + 0.25f * static_cast<float>(i / hw % nc));
    auto dy = test::random_values(count(x_shape), seed++, dtype);
    auto gamma = test::random_values(nc, seed++, DType::f32), beta = test::random_values(nc, seed++, DType::f32);
    for (float& g : gamma) g += 1.5f;
    std::vector<float> dgamma(nc), dbeta(nc), y(x.size()), dx(x.size()), y_eval(x.size());
    cpu.bind({Tensor::wrap(gamma.data(), c_shape), Tensor::wrap(beta.data(), c_shape)},
             {Tensor::wrap(dgamma.data(), c_shape), Tensor::wrap(dbeta.data(), c_shape)});
    std::vector<Tensor> running = cpu.buffers();
    auto mean0 = test::random_values(nc, seed++, DType::f32), var0 = test::random_values(nc, seed++, DType::f32);
    for (float& v : var0) v += 1.5f;
    std::copy(mean0.begin(), mean0.end(), running[0].f32());
    std::copy(var0.begin(), var0.end(), running[1].f32());

    // Batch statistics the saved mean and inverse standard deviation must match.
    std::vector<float> mean(nc), inv_std(nc);
    for (std::size_t ch = 0; ch < nc; ++ch) {
      double s = 0.0, ss = 0.0;
      const auto m = static_cast<double>(static_cast<std::size_t>(b.n) * hw);
      for (std::size_t i = 0; i < x.size(); ++i)
        if (i / hw % nc == ch) s += x[i];
      for (std::size_t i = 0; i < x.size(); ++i)
        if (i / hw % nc == ch) ss += (x[i] - s / m) * (x[i] - s / m);
      mean[ch] = static_cast<float>(s / m);
      inv_std[ch] = static_cast<float>(1.0 / std::sqrt(ss / m + kEps));
    }

    const Tensor xt = Tensor::wrap(x.data(), x_shape), dyt = Tensor::wrap(dy.data(), x_shape);
    Tensor yt = Tensor::wrap(y.data(), x_shape), dxt = Tensor::wrap(dx.data(), x_shape);
    Tensor y_evalt = Tensor::wrap(y_eval.data(), x_shape);
    cpu.forward(xt, yt, StepInfo{});
    cpu.backward(xt, yt, dyt, &dxt);
    StepInfo eval;
    eval.training = false;
    cpu.forward(xt, y_evalt, eval);
    const std::vector<float> mean1(running[0].f32(), running[0].f32() + nc);
    const std::vector<float> var1(running[1].f32(), running[1].f32() + nc);

    cuda::BatchNormOp op(dnn, b.n, b.c, b.h, b.w, dtype, kEps, kMomentum);
    const auto d_x = DeviceBuffer::of_values(x, dtype), d_dy = DeviceBuffer::of_values(dy, dtype);
    const DeviceBuffer d_y(x.size() * dtype_size(dtype)), d_dx(x.size() * dtype_size(dtype)),
        d_y_eval(x.size() * dtype_size(dtype));
    const auto d_gamma = DeviceBuffer::of(gamma), d_beta = DeviceBuffer::of(beta), d_mean = DeviceBuffer::of(mean0),
               d_var = DeviceBuffer::of(var0), d_mean1 = DeviceBuffer::of(mean1), d_var1 = DeviceBuffer::of(var1);
    const DeviceBuffer d_save_mean(nc * sizeof(float)), d_save_inv(nc * sizeof(float)), d_dgamma(nc * sizeof(float)),
        d_dbeta(nc * sizeof(float));
    const auto f = [](const DeviceBuffer& d) { return d.as<float>(); };
    op.forward_training(d_x.get(), d_y.get(), f(d_gamma), f(d_beta), f(d_mean), f(d_var), f(d_save_mean), f(d_save_inv),
                        nullptr);
    op.backward(d_x.get(), d_dy.get(), d_dx.get(), f(d_gamma), f(d_dgamma), f(d_dbeta), f(d_save_mean), f(d_save_inv),
                nullptr);
    op.forward_inference(d_x.get(), d_y_eval.get(), f(d_gamma), f(d_beta), f(d_mean1), f(d_var1), nullptr);

    EXPECT_LT(test::max_rel_error(d_y.read_values(dtype), test::round_to(dtype, y)), tol) << "forward_training y";
    EXPECT_LT(test::max_rel_error(d_mean.read<float>(), mean1), tol) << "running_mean";
    EXPECT_LT(test::max_rel_error(d_var.read<float>(), var1), tol) << "running_var (unbiased)";
    EXPECT_LT(test::max_rel_error(d_save_mean.read<float>(), mean), tol) << "save_mean";
    EXPECT_LT(test::max_rel_error(d_save_inv.read<float>(), inv_std), tol) << "save_inv_std";
    // dx is a difference of terms of size |gamma * inv_std * dy|. With two values a channel
    // (n=2, h=w=1) they cancel to rounding residue (0.0 in exact arithmetic), so each element's
    // error is judged against its terms' size, not against the residue's.
    std::vector<float> dx_terms(dx.size());
    for (std::size_t i = 0; i < dx.size(); ++i) {
      const std::size_t ch = i / hw % nc;
      dx_terms[i] = std::fabs(gamma[ch] * inv_std[ch] * dy[i]);
    }
    const std::vector<float> gpu_dx = d_dx.read_values(dtype), ref_dx = test::round_to(dtype, dx);
    double dx_error = 0.0;
    for (std::size_t i = 0; i < dx.size(); ++i)
      dx_error = std::max(dx_error, std::fabs(static_cast<double>(gpu_dx[i]) - ref_dx[i]) /
                                        (std::fabs(static_cast<double>(ref_dx[i])) + dx_terms[i] + 1e-30));
    EXPECT_LT(dx_error, tol) << "backward dx";
    EXPECT_LT(test::max_rel_error(d_dgamma.read<float>(), dgamma), tol) << "backward dgamma";
    EXPECT_LT(test::max_rel_error(d_dbeta.read<float>(), dbeta), tol) << "backward dbeta";
    EXPECT_LT(test::max_rel_error(d_y_eval.read_values(dtype), test::round_to(dtype, y_eval)), tol)
        << "forward_inference";
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudnnBatchNorm,
                         ::testing::Values(TypeCase{DType::f32, MathMode::strict_f32},
                                           TypeCase{DType::f16, MathMode::strict_f32}),
                         type_name);

TEST(CudnnBatchNormTypes, Bf16IsRejectedClearly) {
  RT_SKIP_WITHOUT_GPU();
  Cudnn dnn;
  test::expect_error_naming([&dnn] { cuda::BatchNormOp op(dnn, 2, 3, 4, 4, DType::bf16, kEps, kMomentum); }, "bf16");
}

// Without a GPU the constructor must fail with a clear Error, not crash.
TEST(CudnnNoGpu, ConstructorThrowsError) {
  if (test::have_gpu()) GTEST_SKIP() << "a CUDA device is visible";
  test::expect_error_naming([] { Cudnn dnn; }, "cudnnCreate");
}

}  // namespace
}  // namespace ringtrain
