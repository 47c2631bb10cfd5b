// BlasLt's epilogues against blas::sgemm plus loops: the bias (of C's type) and/or the ReLU
// applied to C (a NaN row: NaN or 0, see expect_nan_row_is_either), the ReLU's bit-mask and the gradient GEMM
// that applies it, the GELU with its input kept and the gradient GEMM that applies its slope, and
// the bias gradient written beside a weight-gradient GEMM (onto
// a NaN-poisoned vector), at CudaLinear's shapes and odd ones, every transpose combination, each
// input type. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "cuda/nn/cuda_nn_testing.hpp"
#include "nn/cuda/blaslt_gemm.hpp"
#include "ringtrain/nn/gelu_rule.hpp"
#include "ringtrain/nn/layers.hpp"
#include "tensor/blas.hpp"

namespace ringtrain {
namespace {

using cuda::BlasLt;
using cuda::Epilogue;
using cuda::MathMode;
using test::DeviceBuffer;

// A Linear layer's batch, out and in features (10 x 784 is Fashion-MNIST's classifier).
struct LinearCase {
  std::int64_t batch, out, in;
};

constexpr LinearCase kLinearCases[] = {{256, 10, 784}, {7, 10, 784}, {33, 256, 128}, {53, 37, 61}};

GemmShape packed(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k) {
  return GemmShape{trans_a, trans_b, m, n, k, trans_a ? m : k, trans_b ? k : n, n};
}

// op(X)[i][j] of X stored row-major with `cols` columns (X^T when trans).
float op_at(const std::vector<float>& x, bool trans, std::int64_t cols, std::int64_t i, std::int64_t j) {
  return x[static_cast<std::size_t>(trans ? j * cols + i : i * cols + j)];
}

struct TypeCase {
  DType ab, c;
  MathMode math;
};

std::string type_name(const ::testing::TestParamInfo<TypeCase>& info) {
  return std::string(dtype_name(info.param.ab)) + "_" + std::string(dtype_name(info.param.c)) +
         (info.param.math == MathMode::tf32 ? "_tf32" : "");
}

// The ReLU of a NaN in cuBLASLt's epilogues depends on the kernel it picks (on an H200: NaN from
// the f32 kernels, 0 from the bf16/f16 ones; the bit-mask marks it as positive), so the row whose
// input holds a NaN is checked only for being NaN or 0 and left out of the comparison. Training
// does not depend on it: that row's NaN input reaches the weight gradient of the layer that read
// it whatever the ReLU gives, and the step is skipped as non-finite.
void expect_nan_row_is_either(const std::vector<float>& c, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) {
    const float v = c[static_cast<std::size_t>(j)];
    EXPECT_TRUE(std::isnan(v) || v == 0.0f) << "ReLU of the NaN row, column " << j << ": " << v;
  }
}

// values without their first row of n.
std::vector<float> without_first_row(const std::vector<float>& values, std::int64_t n) {
  return {values.begin() + n, values.end()};
}

// Runs body and returns whether BlasLt warned that it fell back to the unfused path (a kernel
// after the plain GEMM): results must be right either way; the test output says which ran.
template <typename Body>
bool fell_back(Body&& body) {
  ::testing::internal::CaptureStderr();
  body();
  return ::testing::internal::GetCapturedStderr().find("cuBLASLt has no algorithm") != std::string::npos;
}

// Forward, y = relu(x W^T + b) in CudaLinear (trans_b): C[batch, out] = alpha op(A) op(B) + beta C,
// then the epilogue's bias (not scaled) and ReLU. With the ReLU, op(A)'s row 0 is NaN: C's row 0
// must come out NaN or 0 and the rest is compared. Returns the error of C; the bias must be left
// as it was.
double forward_error(BlasLt& lt, Epilogue epilogue, const LinearCase& g, bool trans_a, bool trans_b, float beta,
                     const TypeCase& t, std::uint64_t seed) {
  const GemmShape s = packed(trans_a, trans_b, g.batch, g.out, g.in);
  const bool bias_on = epilogue != Epilogue::relu, relu = epilogue != Epilogue::bias;
  const float alpha = 0.75f;
  auto a = test::random_values(static_cast<std::size_t>(s.m * s.k), seed, t.ab);
  if (relu)
    for (std::int64_t k = 0; k < s.k; ++k) a[static_cast<std::size_t>(trans_a ? k * s.m : k)] = std::nanf("");
  const auto b = test::random_values(static_cast<std::size_t>(s.k * s.n), seed + 1, t.ab);
  const auto bias = test::random_values(static_cast<std::size_t>(s.n), seed + 2, t.c);
  auto c_ref = test::random_values(static_cast<std::size_t>(s.m * s.n), seed + 3, t.c);
  const auto da = DeviceBuffer::of_values(a, t.ab), db = DeviceBuffer::of_values(b, t.ab);
  const auto dbias = DeviceBuffer::of_values(bias, t.c);
  auto dc = DeviceBuffer::of_values(c_ref, t.c);
  if (beta == 0.0f) dc.poison();

  lt.gemm(s, alpha, da.get(), db.get(), beta, dc.get(), t.ab, t.c, t.math, nullptr, epilogue,
          bias_on ? dbias.get() : nullptr);
  blas::sgemm(trans_a, trans_b, s.m, s.n, s.k, alpha, a.data(), s.lda, b.data(), s.ldb, beta, c_ref.data(), s.ldc);
  for (std::int64_t i = 0; i < s.m; ++i)
    for (std::int64_t j = 0; j < s.n; ++j) {
      float& v = c_ref[static_cast<std::size_t>(i * s.n + j)];
      v = test::round_to(t.c, v + (bias_on ? bias[static_cast<std::size_t>(j)] : 0.0f));
    }
  if (relu) ReLU::apply(c_ref.data(), c_ref.data(), static_cast<std::int64_t>(c_ref.size()));
  EXPECT_EQ(dbias.read_values(t.c), bias) << "the bias was written";
  const std::vector<float> c = dc.read_values(t.c);
  if (!relu) return test::max_rel_error(c, c_ref);
  expect_nan_row_is_either(c, s.n);
  return test::max_rel_error(without_first_row(c, s.n), without_first_row(c_ref, s.n));
}

struct GradErrors {
  double c, vector;
};

// Backward, dW = dy^T x in CudaLinear (trans_a): C[out, in] = op(A) op(B) + beta C and
// vector[i] = sum over the batch of op(A)[i][k], written onto NaN.
GradErrors bias_grad_errors(BlasLt& lt, const LinearCase& g, bool trans_a, bool trans_b, float beta, const TypeCase& t,
                            std::uint64_t seed) {
  const GemmShape s = packed(trans_a, trans_b, g.out, g.in, g.batch);
  const auto a = test::random_values(static_cast<std::size_t>(s.m * s.k), seed, t.ab);
  const auto b = test::random_values(static_cast<std::size_t>(s.k * s.n), seed + 1, t.ab);
  auto c_ref = test::random_values(static_cast<std::size_t>(s.m * s.n), seed + 2, t.c);
  const auto da = DeviceBuffer::of_values(a, t.ab), db = DeviceBuffer::of_values(b, t.ab);
  auto dc = DeviceBuffer::of_values(c_ref, t.c);
  if (beta == 0.0f) dc.poison();
  const DeviceBuffer dvector(static_cast<std::size_t>(s.m) * sizeof(float));  // NaN until written

  lt.gemm(s, 1.0f, da.get(), db.get(), beta, dc.get(), t.ab, t.c, t.math, nullptr, Epilogue::bias_grad,
          dvector.as<float>());
  blas::sgemm(trans_a, trans_b, s.m, s.n, s.k, 1.0f, a.data(), s.lda, b.data(), s.ldb, beta, c_ref.data(), s.ldc);
  std::vector<float> vector_ref(static_cast<std::size_t>(s.m));
  for (std::int64_t i = 0; i < s.m; ++i) {
    double sum = 0.0;
    for (std::int64_t k = 0; k < s.k; ++k) sum += op_at(a, trans_a, trans_a ? s.m : s.k, i, k);
    vector_ref[static_cast<std::size_t>(i)] = static_cast<float>(sum);
  }
  return GradErrors{test::max_rel_error(dc.read_values(t.c), test::round_to(t.c, c_ref)),
                    test::max_rel_error(dvector.read_values(DType::f32), vector_ref)};
}

// Low-precision inputs are compared with the tolerance of their type even when C is f32.
const auto kTypes = ::testing::Values(
    TypeCase{DType::f32, DType::f32, MathMode::strict_f32}, TypeCase{DType::f32, DType::f32, MathMode::tf32},
    TypeCase{DType::bf16, DType::f32, MathMode::strict_f32}, TypeCase{DType::bf16, DType::bf16, MathMode::strict_f32},
    TypeCase{DType::f16, DType::f32, MathMode::strict_f32}, TypeCase{DType::f16, DType::f16, MathMode::strict_f32});

class BlasLtForwardEpilogues : public ::testing::TestWithParam<TypeCase> {};

TEST_P(BlasLtForwardEpilogues, MatchCpuGemmPlusBiasAndReLU) {
  RT_SKIP_WITHOUT_GPU();
  const TypeCase t = GetParam();
  const double tol = test::tolerance(t.c == DType::f32 ? t.ab : t.c, t.math);
  for (const Epilogue e : {Epilogue::bias, Epilogue::relu, Epilogue::bias_relu}) {
    const char* name = e == Epilogue::bias ? "bias" : e == Epilogue::relu ? "relu" : "bias + relu";
    BlasLt lt;  // one per epilogue: its fallback warning comes once
    std::uint64_t seed = 500;
    const bool unfused = fell_back([&] {
      for (const LinearCase& g : kLinearCases)
        for (int trans = 0; trans < 4; ++trans)
          for (float beta : {0.0f, 1.0f}) {
            const bool ta = (trans & 1) != 0, tb = (trans & 2) != 0;
            EXPECT_LT(forward_error(lt, e, g, ta, tb, beta, t, seed += 4), tol)
                << name << " batch=" << g.batch << " out=" << g.out << " in=" << g.in << " trans_a=" << ta
                << " trans_b=" << tb << " beta=" << beta;
          }
    });
    std::cout << "[ info ] " << name
              << " epilogue: " << (unfused ? "unfused for some shapes (kernel after the GEMM)" : "fused") << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Types, BlasLtForwardEpilogues, kTypes, type_name);

class BlasLtBiasGradEpilogue : public ::testing::TestWithParam<TypeCase> {};

TEST_P(BlasLtBiasGradEpilogue, MatchesCpuGemmPlusColumnSums) {
  RT_SKIP_WITHOUT_GPU();
  const TypeCase t = GetParam();
  BlasLt lt;
  if (t.c != DType::f32) {  // the vector is C's type and a bias gradient is f32 (CudaLinear's dW is)
    EXPECT_THROW(bias_grad_errors(lt, kLinearCases[0], false, false, 0.0f, t, 900), Error);
    return;
  }
  const double tol_c = test::tolerance(t.ab, t.math);
  const double tol_vector = test::tolerance(t.ab, t.math);
  std::uint64_t seed = 900;
  const bool unfused = fell_back([&] {
    for (const LinearCase& g : kLinearCases)
      for (int trans = 0; trans < 4; ++trans)
        for (float beta : {0.0f, 1.0f}) {
          const bool ta = (trans & 1) != 0, tb = (trans & 2) != 0;
          const GradErrors err = bias_grad_errors(lt, g, ta, tb, beta, t, seed += 3);
          const auto where = ::testing::Message() << "batch=" << g.batch << " out=" << g.out << " in=" << g.in
                                                  << " trans_a=" << ta << " trans_b=" << tb << " beta=" << beta;
          EXPECT_LT(err.c, tol_c) << where;
          EXPECT_LT(err.vector, tol_vector) << where;
        }
  });
  std::cout << "[ info ] bias-gradient epilogue: "
            << (unfused ? "unfused for some shapes (kernel after the GEMM)" : "fused") << "\n";
}

INSTANTIATE_TEST_SUITE_P(Types, BlasLtBiasGradEpilogue, kTypes, type_name);

constexpr std::int64_t kNext = 13;  // the next Linear's outputs: its dx GEMM's k

// A Linear + activation and the next Linear's dx GEMM, on the host and on the device: x [batch,
// in], W [out, in], b [out], the next layer's output gradient dz [batch, kNext] and weight V
// [kNext, out]. With nan_row, x's row 0 is NaN.
struct ChainOperands {
  ChainOperands(const LinearCase& g, std::uint64_t seed, const TypeCase& t, bool nan_row)
      : x(random_x(g, seed, t.ab, nan_row)),
        w(test::random_values(static_cast<std::size_t>(g.out * g.in), seed + 1, t.ab)),
        bias(test::random_values(static_cast<std::size_t>(g.out), seed + 2, t.c)),
        dz(test::random_values(static_cast<std::size_t>(g.batch * kNext), seed + 3, t.ab)),
        v(test::random_values(static_cast<std::size_t>(kNext * g.out), seed + 4, t.ab)),
        d_x(DeviceBuffer::of_values(x, t.ab)),
        d_w(DeviceBuffer::of_values(w, t.ab)),
        d_bias(DeviceBuffer::of_values(bias, t.c)),
        d_dz(DeviceBuffer::of_values(dz, t.ab)),
        d_v(DeviceBuffer::of_values(v, t.ab)) {}
  static std::vector<float> random_x(const LinearCase& g, std::uint64_t seed, DType dtype, bool nan_row) {
    auto x = test::random_values(static_cast<std::size_t>(g.batch * g.in), seed, dtype);
    if (nan_row)
      for (std::int64_t k = 0; k < g.in; ++k) x[static_cast<std::size_t>(k)] = std::nanf("");
    return x;
  }
  std::vector<float> x, w, bias, dz, v;
  DeviceBuffer d_x, d_w, d_bias, d_dz, d_v;
};

// Calls body(g, bias_on, lt, fwd, grad, operands) for every Linear case without and with a bias:
// a fresh BlasLt, the forward GEMM's shape, the next Linear's dx GEMM's and the operands (a new
// seed each).
template <typename Body>
void for_each_chain(const TypeCase& t, std::uint64_t seed, bool nan_row, Body&& body) {
  for (const LinearCase& g : kLinearCases)
    for (const bool bias_on : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "batch=" << g.batch << " out=" << g.out << " in=" << g.in
                                        << " bias=" << bias_on);
      BlasLt lt;
      const ChainOperands o(g, seed += 5, t, nan_row);
      body(g, bias_on, lt, packed(false, true, g.batch, g.out, g.in), packed(false, false, g.batch, g.out, kNext), o);
    }
}

class BlasLtReluMask : public ::testing::TestWithParam<TypeCase> {};

// A Linear + ReLU whose ReLU gradient the next Linear's dx GEMM applies (CudaLinear): the forward
// with the bit-mask gives the CPU's relu(x W^T + b), and the gradient GEMM dx = dz V (C of the
// forward's shape) comes out as the CPU's product with the ReLU's rule (dx = 0 where y = 0), from
// the bit-mask when cuBLASLt wrote it and from y when it did not or when there is no mask (the
// kernel after the plain GEMM). Row 0 of x is NaN: its forward is NaN or 0, its gradient finite,
// the other rows compared.
TEST_P(BlasLtReluMask, TheGradientGemmAppliesTheForwardsReLU) {
  RT_SKIP_WITHOUT_GPU();
  const TypeCase t = GetParam();
  if (t.c != t.ab) GTEST_SKIP() << "activations and their gradients share one type";
  const double tol = test::tolerance(t.c, t.math);
  for_each_chain(
      t, 700, true,
      [&](const LinearCase& g, bool bias_on, BlasLt& lt, const GemmShape& fwd, const GemmShape& grad,
          const ChainOperands& o) {
        const auto &x = o.x, &w = o.w, &bias = o.bias, &dz = o.dz, &v = o.v;
        const std::int64_t ld = cuda::ReluMask::row_bits(g.out);
        const DeviceBuffer y(static_cast<std::size_t>(g.batch * g.out) * dtype_size(t.c));
        const DeviceBuffer bits(static_cast<std::size_t>(ld / 8 * g.batch));
        DeviceBuffer dgrad(static_cast<std::size_t>(g.batch * g.out) * dtype_size(t.c));

        cuda::ReluMask forward_mask{bits.get(), ld, nullptr};
        const bool written = lt.gemm(fwd, 1.0f, o.d_x.get(), o.d_w.get(), 0.0f, y.get(), t.ab, t.c, t.math, nullptr,
                                     bias_on ? Epilogue::bias_relu_mask : Epilogue::relu_mask,
                                     bias_on ? o.d_bias.get() : nullptr, &forward_mask);
        std::vector<float> y_ref(static_cast<std::size_t>(g.batch * g.out), 0.0f);
        blas::sgemm(false, true, fwd.m, fwd.n, fwd.k, 1.0f, x.data(), fwd.lda, w.data(), fwd.ldb, 0.0f, y_ref.data(),
                    fwd.ldc);
        for (std::size_t i = 0; i < y_ref.size(); ++i)
          y_ref[i] = test::round_to(t.c, y_ref[i] + (bias_on ? bias[i % static_cast<std::size_t>(g.out)] : 0.0f));
        ReLU::apply(y_ref.data(), y_ref.data(), static_cast<std::int64_t>(y_ref.size()));
        const auto y_got = y.read_values(t.c);
        expect_nan_row_is_either(y_got, g.out);
        EXPECT_LT(test::max_rel_error(without_first_row(y_got, g.out), without_first_row(y_ref, g.out)), tol);

        std::vector<float> dx_ref(static_cast<std::size_t>(g.batch * g.out), 0.0f);
        blas::sgemm(false, false, grad.m, grad.n, grad.k, 1.0f, dz.data(), grad.lda, v.data(), grad.ldb, 0.0f,
                    dx_ref.data(), grad.ldc);
        for (std::size_t i = 0; i < dx_ref.size(); ++i)
          dx_ref[i] = y_got[i] > 0.0f ? test::round_to(t.c, dx_ref[i]) : 0.0f;
        for (const bool with_bits : {true, false}) {
          const cuda::ReluMask mask{with_bits && written ? bits.get() : nullptr, ld, y.get()};
          dgrad.poison();
          lt.gemm(grad, 1.0f, o.d_dz.get(), o.d_v.get(), 0.0f, dgrad.get(), t.ab, t.c, t.math, nullptr,
                  Epilogue::relu_grad, nullptr, &mask);
          const auto got = dgrad.read_values(t.c);
          EXPECT_LT(test::max_rel_error(without_first_row(got, g.out), without_first_row(dx_ref, g.out)), tol)
              << "bits " << (mask.bits != nullptr);
          for (std::int64_t j = 0; j < g.out; ++j)
            EXPECT_TRUE(std::isfinite(got[static_cast<std::size_t>(j)])) << "NaN row, j " << j;
        }
        std::cout << "[ info ] " << (bias_on ? "bias + relu" : "relu")
                  << " with bit-mask: " << (written ? "written by cuBLASLt" : "not written (the kernel ran)") << "\n";
      });
}

INSTANTIATE_TEST_SUITE_P(Types, BlasLtReluMask, kTypes, type_name);

class BlasLtGelu : public ::testing::TestWithParam<TypeCase> {};

float cpu_gelu(float x) {
  const float u = gelu_u(x);
  return gelu_value(x, u, std::exp(-2.0f * std::fabs(u)));
}

float cpu_gelu_slope(float x) {
  const float u = gelu_u(x);
  return gelu_slope(x, u, std::exp(-2.0f * std::fabs(u)));
}

// A Linear + GELU whose GELU gradient the next Linear's dx GEMM applies (CudaLinear in bf16/f16):
// the forward gives the CPU's gelu(x W^T + b) and keeps x W^T + b, and the gradient GEMM dx = dz V
// (C of the forward's shape) comes out as the CPU's product times gelu'(x W^T + b), whether
// cuBLASLt ran the epilogues or the kernels after the plain GEMM did (the output says which; an
// out of 37 is no whole 16-byte row, so that case always takes the kernels).
TEST_P(BlasLtGelu, TheGradientGemmAppliesTheForwardsGelu) {
  RT_SKIP_WITHOUT_GPU();
  const TypeCase t = GetParam();
  if (t.c != t.ab) GTEST_SKIP() << "activations and their gradients share one type";
  // cuBLASLt's tanh and the CPU's exp differ by more than f32's rounding: half-precision bounds.
  const double tol = 2 * test::tolerance(DType::bf16, t.math);
  for_each_chain(t, 900, false,
                 [&](const LinearCase& g, bool bias_on, BlasLt& lt, const GemmShape& fwd, const GemmShape& grad,
                     const ChainOperands& o) {
                   const auto &x = o.x, &w = o.w, &bias = o.bias, &dz = o.dz, &v = o.v;
                   const std::size_t count = static_cast<std::size_t>(g.batch * g.out);
                   const DeviceBuffer y(count * dtype_size(t.c)), pre(count * dtype_size(t.c));
                   DeviceBuffer dgrad(count * dtype_size(t.c));

                   const cuda::GeluAux aux{pre.get(), g.out};
                   const bool fused_forward =
                       lt.gemm(fwd, 1.0f, o.d_x.get(), o.d_w.get(), 0.0f, y.get(), t.ab, t.c, t.math, nullptr,
                               bias_on ? Epilogue::bias_gelu_aux : Epilogue::gelu_aux,
                               bias_on ? o.d_bias.get() : nullptr, nullptr, &aux);
                   std::vector<float> pre_ref(count, 0.0f), y_ref(count);
                   blas::sgemm(false, true, fwd.m, fwd.n, fwd.k, 1.0f, x.data(), fwd.lda, w.data(), fwd.ldb, 0.0f,
                               pre_ref.data(), fwd.ldc);
                   for (std::size_t i = 0; i < count; ++i) {
                     pre_ref[i] += bias_on ? bias[i % static_cast<std::size_t>(g.out)] : 0.0f;
                     y_ref[i] = test::round_to(t.c, cpu_gelu(pre_ref[i]));
                     pre_ref[i] = test::round_to(t.c, pre_ref[i]);
                   }
                   const auto pre_got = pre.read_values(t.c);
                   EXPECT_LT(test::max_rel_error(pre_got, pre_ref), test::tolerance(t.c, t.math)) << "the GELU's input";
                   EXPECT_LT(test::max_rel_error(y.read_values(t.c), y_ref), tol) << "y";

                   std::vector<float> dx_ref(count, 0.0f);
                   blas::sgemm(false, false, grad.m, grad.n, grad.k, 1.0f, dz.data(), grad.lda, v.data(), grad.ldb,
                               0.0f, dx_ref.data(), grad.ldc);
                   for (std::size_t i = 0; i < count; ++i)
                     dx_ref[i] = test::round_to(t.c, dx_ref[i] * cpu_gelu_slope(pre_got[i]));
                   dgrad.poison();
                   const bool fused_grad = lt.gemm(grad, 1.0f, o.d_dz.get(), o.d_v.get(), 0.0f, dgrad.get(), t.ab, t.c,
                                                   t.math, nullptr, Epilogue::gelu_grad, nullptr, nullptr, &aux);
                   EXPECT_LT(test::max_rel_error(dgrad.read_values(t.c), dx_ref), tol) << "dx";
                   std::cout << "[ info ] " << (bias_on ? "bias + gelu" : "gelu") << " out=" << g.out << ": forward "
                             << (fused_forward ? "fused" : "kernels") << ", gradient "
                             << (fused_grad ? "fused" : "kernels") << "\n";
                 });
}

INSTANTIATE_TEST_SUITE_P(Types, BlasLtGelu, kTypes, type_name);

// A plan is per epilogue: the same shape and pointers without one must not add the bias, nor
// touch the vector.
TEST(BlasLtEpiloguePlans, EpilogueIsPartOfThePlan) {
  RT_SKIP_WITHOUT_GPU();
  BlasLt lt;
  const GemmShape s = packed(false, true, 7, 10, 784);
  const auto a = test::random_values(static_cast<std::size_t>(s.m * s.k), 1, DType::bf16);
  const auto b = test::random_values(static_cast<std::size_t>(s.k * s.n), 2, DType::bf16);
  const std::vector<float> bias(static_cast<std::size_t>(s.n), 4.0f);
  const auto da = DeviceBuffer::of_values(a, DType::bf16), db = DeviceBuffer::of_values(b, DType::bf16);
  const auto dbias = DeviceBuffer::of_values(bias, DType::f32);
  const DeviceBuffer dc(static_cast<std::size_t>(s.m * s.n) * sizeof(float));
  std::vector<float> ref(static_cast<std::size_t>(s.m * s.n), 0.0f);
  blas::sgemm(false, true, s.m, s.n, s.k, 1.0f, a.data(), s.lda, b.data(), s.ldb, 0.0f, ref.data(), s.ldc);

  lt.gemm(s, 1.0f, da.get(), db.get(), 0.0f, dc.get(), DType::bf16, DType::f32, MathMode::strict_f32, nullptr,
          Epilogue::bias, dbias.as<float>());
  std::vector<float> with_bias = ref;
  for (std::size_t i = 0; i < with_bias.size(); ++i) with_bias[i] += bias[i % static_cast<std::size_t>(s.n)];
  EXPECT_LT(test::max_rel_error(dc.read_values(DType::f32), with_bias), test::kTolHalf);

  lt.gemm(s, 1.0f, da.get(), db.get(), 0.0f, dc.get(), DType::bf16, DType::f32, MathMode::strict_f32, nullptr);
  EXPECT_LT(test::max_rel_error(dc.read_values(DType::f32), ref), test::kTolHalf);
  EXPECT_EQ(dbias.read_values(DType::f32), bias);
}

// Vectors at any offset into an arena (aligned to their element only) are right, fused or not:
// the forward's f16 bias 2-byte aligned, the gradient's f32 vector 4-byte aligned.
TEST(BlasLtEpiloguePlans, MisalignedVectors) {
  RT_SKIP_WITHOUT_GPU();
  BlasLt lt;
  const LinearCase g{9, 10, 33};
  const GemmShape fwd = packed(false, true, g.batch, g.out, g.in), bwd = packed(true, false, g.out, g.in, g.batch);
  const auto x = test::random_values(static_cast<std::size_t>(g.batch * g.in), 3, DType::f16);
  const auto w = test::random_values(static_cast<std::size_t>(g.out * g.in), 4, DType::f16);
  const auto dy = test::random_values(static_cast<std::size_t>(g.batch * g.out), 5, DType::f16);
  const auto bias = test::random_values(static_cast<std::size_t>(g.out + 1), 6, DType::f16);
  const auto dx = DeviceBuffer::of_values(x, DType::f16), dw = DeviceBuffer::of_values(w, DType::f16);
  const auto ddy = DeviceBuffer::of_values(dy, DType::f16), dbias = DeviceBuffer::of_values(bias, DType::f16);
  const DeviceBuffer y(static_cast<std::size_t>(g.batch * g.out) * sizeof(std::uint16_t));
  const DeviceBuffer grad_w(static_cast<std::size_t>(g.out * g.in) * sizeof(float));
  const DeviceBuffer grad_b(static_cast<std::size_t>(g.out + 1) * sizeof(float));

  lt.gemm(fwd, 1.0f, dx.get(), dw.get(), 0.0f, y.get(), DType::f16, DType::f16, MathMode::strict_f32, nullptr,
          Epilogue::bias, dbias.as<std::uint16_t>() + 1);
  lt.gemm(bwd, 1.0f, ddy.get(), dx.get(), 0.0f, grad_w.get(), DType::f16, DType::f32, MathMode::strict_f32, nullptr,
          Epilogue::bias_grad, grad_b.as<float>() + 1);

  std::vector<float> y_ref(static_cast<std::size_t>(g.batch * g.out), 0.0f);
  blas::sgemm(false, true, fwd.m, fwd.n, fwd.k, 1.0f, x.data(), fwd.lda, w.data(), fwd.ldb, 0.0f, y_ref.data(),
              fwd.ldc);
  std::vector<float> gb_ref(static_cast<std::size_t>(g.out), 0.0f);
  for (std::int64_t i = 0; i < g.batch; ++i)
    for (std::int64_t o = 0; o < g.out; ++o) {
      const auto at = static_cast<std::size_t>(i * g.out + o);
      y_ref[at] = test::round_to(DType::f16, y_ref[at] + bias[static_cast<std::size_t>(o) + 1]);
      gb_ref[static_cast<std::size_t>(o)] += dy[at];
    }
  EXPECT_LT(test::max_rel_error(y.read_values(DType::f16), y_ref), test::kTolHalf);
  const auto gb = grad_b.read_values(DType::f32);
  EXPECT_TRUE(std::isnan(gb[0])) << "written before the vector";
  EXPECT_LT(test::max_rel_error(std::vector<float>(gb.begin() + 1, gb.end()), gb_ref), test::kTolHalf);
}

TEST(BlasLtEpilogueErrors, RejectsBadArguments) {
  RT_SKIP_WITHOUT_GPU();
  BlasLt lt;
  const DeviceBuffer d(96 * sizeof(float));  // A, B, C (each up to 4 x 5) and the vector, apart
  float* base = d.as<float>();
  float* v = base + 72;
  const auto gemm = [&](const GemmShape& s, float alpha, Epilogue e, void* vector) {
    lt.gemm(s, alpha, base, base + 24, 0.0f, base + 48, DType::f32, DType::f32, MathMode::strict_f32, nullptr, e,
            vector);
  };
  const GemmShape ok{false, false, 4, 4, 4, 4, 4, 4};
  EXPECT_NO_THROW(gemm(ok, 1.0f, Epilogue::bias_grad, v));
  EXPECT_NO_THROW(gemm(ok, 0.5f, Epilogue::bias, v));
  EXPECT_THROW(gemm(ok, 0.5f, Epilogue::bias_grad, v), Error);  // the gradient takes alpha == 1 only
  EXPECT_THROW(gemm(ok, 1.0f, Epilogue::bias, nullptr), Error);
  EXPECT_THROW(gemm(ok, 1.0f, Epilogue::none, v), Error);
  EXPECT_THROW(gemm(ok, 1.0f, Epilogue::relu, v), Error);  // relu reads no vector
  EXPECT_NO_THROW(gemm(ok, 1.0f, Epilogue::relu, nullptr));
  EXPECT_THROW(gemm(ok, 1.0f, Epilogue::bias_relu, nullptr), Error);
  EXPECT_THROW(gemm(GemmShape{false, false, 4, 4, 4, 4, 4, 5}, 1.0f, Epilogue::relu, nullptr), Error);  // ldc > n
  EXPECT_THROW(gemm(GemmShape{false, false, 4, 4, 4, 4, 4, 5}, 1.0f, Epilogue::bias, v), Error);        // ldc > n
  EXPECT_THROW(gemm(GemmShape{false, false, 4, 4, 4, 5, 4, 4}, 1.0f, Epilogue::bias_grad, v), Error);   // lda > k
  // the gradient vector is C's type and f32 only: a bf16 C cannot carry it
  EXPECT_THROW(lt.gemm(ok, 1.0f, base, base + 24, 0.0f, base + 48, DType::bf16, DType::bf16, MathMode::strict_f32,
                       nullptr, Epilogue::bias_grad, v),
               Error);
  // the ReLU bit-mask: needed by exactly its epilogues, in whole 128-bit words per row, with
  // somewhere to write it (forward) or the ReLU's output to fall back on (gradient)
  const cuda::ReluMask mask{v, 128, base};
  const auto masked = [&](Epilogue e, const cuda::ReluMask* m) {
    lt.gemm(ok, 1.0f, base, base + 24, 0.0f, base + 48, DType::f32, DType::f32, MathMode::strict_f32, nullptr, e,
            nullptr, m);
  };
  EXPECT_NO_THROW(masked(Epilogue::relu_mask, &mask));
  EXPECT_NO_THROW(masked(Epilogue::relu_grad, &mask));
  EXPECT_THROW(masked(Epilogue::relu_mask, nullptr), Error);
  EXPECT_THROW(masked(Epilogue::relu, &mask), Error);
  const cuda::ReluMask part_word{v, 64, nullptr}, no_bits{nullptr, 128, nullptr}, no_output{v, 128, nullptr};
  EXPECT_THROW(masked(Epilogue::relu_mask, &part_word), Error);
  EXPECT_THROW(masked(Epilogue::relu_mask, &no_bits), Error);
  EXPECT_THROW(masked(Epilogue::relu_grad, &no_output), Error);
}

}  // namespace
}  // namespace ringtrain
