// BlasLt (cuBLASLt GEMM) against blas::sgemm: all four transpose combinations, odd shapes and
// padded leading dimensions (an LM head's vocabulary of 50257 among them), f32 strict and tf32,
// bf16/f16 inputs with f32 or low-precision C, beta = 0 onto a NaN-poisoned C and beta = 1, one
// and several matrices per call; each on cuBLASLt and on the cuBLAS fallback; the warning for a
// large GEMM with unaligned rows. Skips without a GPU.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/nn/cuda_nn_testing.hpp"
#include "nn/cuda/blaslt_gemm.hpp"
#include "tensor/blas.hpp"

namespace ringtrain {
namespace {

using cuda::BlasLt;
using cuda::MathMode;
using test::DeviceBuffer;

struct GemmCase {
  std::int64_t m, n, k, pad;  // pad: extra elements per row of A, B and C
};

constexpr GemmCase kCases[] = {{37, 53, 61, 0}, {1, 129, 7, 3}, {130, 3, 257, 0}, {64, 96, 128, 5}, {16, 50257, 64, 0}};

// Runs one GEMM on the GPU and on the CPU (inputs rounded to ab_type, C to c_type) and
// returns the error over the m x n block. Also checks that C's padding is left alone.
double gemm_error(BlasLt& lt, const GemmCase& g, bool trans_a, bool trans_b, float beta, DType ab_type, DType c_type,
                  MathMode math, std::uint64_t seed) {
  GemmShape s;
  s.trans_a = trans_a;
  s.trans_b = trans_b;
  s.m = g.m;
  s.n = g.n;
  s.k = g.k;
  const std::int64_t rows_a = trans_a ? g.k : g.m, rows_b = trans_b ? g.n : g.k;
  s.lda = (trans_a ? g.m : g.k) + g.pad;
  s.ldb = (trans_b ? g.k : g.n) + g.pad;
  s.ldc = g.n + g.pad;
  const float alpha = 0.75f;
  const auto a = test::random_values(static_cast<std::size_t>(rows_a * s.lda), seed, ab_type);
  const auto b = test::random_values(static_cast<std::size_t>(rows_b * s.ldb), seed + 1, ab_type);
  auto c_ref = test::random_values(static_cast<std::size_t>(g.m * s.ldc), seed + 2, c_type);
  const auto da = DeviceBuffer::of_values(a, ab_type), db = DeviceBuffer::of_values(b, ab_type);
  auto dc = DeviceBuffer::of_values(c_ref, c_type);
  if (beta == 0.0f) dc.poison();
  const std::vector<float> c_before = dc.read_values(c_type);

  lt.gemm(s, alpha, da.get(), db.get(), beta, dc.get(), ab_type, c_type, math, nullptr);
  blas::sgemm(trans_a, trans_b, s.m, s.n, s.k, alpha, a.data(), s.lda, b.data(), s.ldb, beta, c_ref.data(), s.ldc);

  const std::vector<float> c_gpu = dc.read_values(c_type);
  std::vector<float> got, want;
  for (std::int64_t i = 0; i < g.m; ++i)
    for (std::int64_t j = 0; j < s.ldc; ++j) {
      const std::size_t at = static_cast<std::size_t>(i * s.ldc + j);
      if (j < g.n) {
        got.push_back(c_gpu[at]);
        want.push_back(test::round_to(c_type, c_ref[at]));
      } else {
        EXPECT_EQ(std::bit_cast<std::uint32_t>(c_gpu[at]), std::bit_cast<std::uint32_t>(c_before[at]))
            << "padding of C written at " << at;
      }
    }
  return test::max_rel_error(got, want);
}

struct TypeCase {
  DType ab, c;
  MathMode math;
};

class BlasLtGemm : public ::testing::TestWithParam<TypeCase> {};

TEST_P(BlasLtGemm, MatchesCpuSgemm) {
  RT_SKIP_WITHOUT_GPU();
  const TypeCase t = GetParam();
  const double tol = test::tolerance(t.c == DType::f32 ? t.ab : t.c, t.math);
  for (const bool on_cublas : {false, true}) {
    BlasLt lt(std::size_t{32} << 20, on_cublas);
    std::uint64_t seed = 100;
    for (const GemmCase& g : kCases)
      for (int trans = 0; trans < 4; ++trans)
        for (float beta : {0.0f, 1.0f}) {
          const bool ta = (trans & 1) != 0, tb = (trans & 2) != 0;
          const double err = gemm_error(lt, g, ta, tb, beta, t.ab, t.c, t.math, seed += 3);
          EXPECT_LT(err, tol) << (on_cublas ? "cuBLAS" : "cuBLASLt") << " m=" << g.m << " n=" << g.n << " k=" << g.k
                              << " pad=" << g.pad << " trans_a=" << ta << " trans_b=" << tb << " beta=" << beta;
        }
  }
}

// Several matrices per call (attention's per-head GEMMs), strided, on both paths: each equals its own sgemm.
TEST(BlasLtGemmBatched, EachMatrixMatchesCpuSgemm) {
  RT_SKIP_WITHOUT_GPU();
  const std::int64_t batch = 3, m = 5, n = 7, k = 9;
  const GemmShape s{false, true, m, n, k, k, k, n, batch, m * k + 2, n * k + 1, m * n + 3};
  const auto a = test::random_values(static_cast<std::size_t>(batch * s.stride_a), 21, DType::bf16);
  const auto b = test::random_values(static_cast<std::size_t>(batch * s.stride_b), 22, DType::bf16);
  const auto da = DeviceBuffer::of_values(a, DType::bf16), db = DeviceBuffer::of_values(b, DType::bf16);
  std::vector<float> ref(static_cast<std::size_t>(batch * s.stride_c), 0.0f);
  for (std::int64_t i = 0; i < batch; ++i)
    blas::sgemm(false, true, m, n, k, 1.0f, a.data() + i * s.stride_a, k, b.data() + i * s.stride_b, k, 0.0f,
                ref.data() + i * s.stride_c, n);
  for (const bool on_cublas : {false, true}) {
    BlasLt lt(std::size_t{32} << 20, on_cublas);
    const DeviceBuffer dc(ref.size() * sizeof(float));
    lt.gemm(s, 1.0f, da.get(), db.get(), 0.0f, dc.get(), DType::bf16, DType::f32, MathMode::strict_f32, nullptr);
    const auto got = dc.read_values(DType::f32);
    std::vector<float> got_blocks, want_blocks;
    for (std::int64_t i = 0; i < batch; ++i)
      for (std::int64_t j = 0; j < m * n; ++j) {
        got_blocks.push_back(got[static_cast<std::size_t>(i * s.stride_c + j)]);
        want_blocks.push_back(ref[static_cast<std::size_t>(i * s.stride_c + j)]);
      }
    EXPECT_LT(test::max_rel_error(got_blocks, want_blocks), test::kTolHalf) << (on_cublas ? "cuBLAS" : "cuBLASLt");
  }
}

// Low-precision inputs are compared with the tolerance of their type even when C is f32.
INSTANTIATE_TEST_SUITE_P(Types, BlasLtGemm,
                         ::testing::Values(TypeCase{DType::f32, DType::f32, MathMode::strict_f32},
                                           TypeCase{DType::f32, DType::f32, MathMode::tf32},
                                           TypeCase{DType::bf16, DType::f32, MathMode::strict_f32},
                                           TypeCase{DType::bf16, DType::bf16, MathMode::strict_f32},
                                           TypeCase{DType::f16, DType::f32, MathMode::strict_f32},
                                           TypeCase{DType::f16, DType::f16, MathMode::strict_f32}),
                         [](const ::testing::TestParamInfo<TypeCase>& info) {
                           return std::string(dtype_name(info.param.ab)) + "_" + std::string(dtype_name(info.param.c)) +
                                  (info.param.math == MathMode::tf32 ? "_tf32" : "");
                         });

// Views at odd offsets into an arena (2-byte aligned for f16) must still be correct: the
// heuristic is told the real alignment.
TEST(BlasLtGemmViews, MisalignedOperands) {
  RT_SKIP_WITHOUT_GPU();
  BlasLt lt;
  const std::int64_t m = 33, n = 17, k = 41;
  const auto a = test::random_values(static_cast<std::size_t>(m * k + 1), 7, DType::f16);
  const auto b = test::random_values(static_cast<std::size_t>(k * n + 1), 8, DType::f16);
  const auto da = DeviceBuffer::of_values(a, DType::f16), db = DeviceBuffer::of_values(b, DType::f16);
  const DeviceBuffer dc(static_cast<std::size_t>(m * n + 1) * dtype_size(DType::f16));
  const GemmShape s{false, false, m, n, k, k, n, n};
  const auto offset = [](const DeviceBuffer& d) { return d.as<std::uint16_t>() + 1; };
  lt.gemm(s, 1.0f, offset(da), offset(db), 0.0f, offset(dc), DType::f16, DType::f16, MathMode::strict_f32, nullptr);
  std::vector<float> ref(static_cast<std::size_t>(m * n), 0.0f);
  blas::sgemm(false, false, m, n, k, 1.0f, a.data() + 1, k, b.data() + 1, n, 0.0f, ref.data(), n);
  const auto got = dc.read_values(DType::f16);
  EXPECT_LT(test::max_rel_error(std::vector<float>(got.begin() + 1, got.end()), test::round_to(DType::f16, ref)),
            test::kTolHalf);
}

TEST(BlasLtGemmErrors, RejectsBadArguments) {
  RT_SKIP_WITHOUT_GPU();
  BlasLt lt;
  const DeviceBuffer d(64 * sizeof(float));
  const GemmShape short_ld{false, false, 4, 4, 4, 3, 4, 4};  // lda < k
  EXPECT_THROW(
      lt.gemm(short_ld, 1.0f, d.get(), d.get(), 0.0f, d.get(), DType::f32, DType::f32, MathMode::strict_f32, nullptr),
      Error);
  const GemmShape ok{false, false, 4, 4, 4, 4, 4, 4};
  EXPECT_THROW(
      lt.gemm(ok, 1.0f, d.get(), d.get(), 0.0f, d.get(), DType::bf16, DType::f16, MathMode::strict_f32, nullptr),
      Error);  // C neither f32 nor the input type
  EXPECT_THROW(
      lt.gemm(ok, 1.0f, d.get(), d.get(), 0.0f, d.get(), DType::i32, DType::i32, MathMode::strict_f32, nullptr), Error);
}

// A large GEMM whose rows are not whole 16-byte vectors (a GPT-2 LM head over 50257 tokens) is
// warned about once, naming the padding; padded to 50304 it is not.
// A Linear pads its own output rows (CudaModel.WideUnalignedHeadMatchesCpu); a GEMM called
// directly with such rows is named.
TEST(BlasLtGemmWarnings, AnUnalignedLargeGemmIsNamedOnce) {
  RT_SKIP_WITHOUT_GPU();
  const std::int64_t rows = 64, width = 768;
  auto warning_for = [&](BlasLt& lt, std::int64_t vocab) {
    const DeviceBuffer x(static_cast<std::size_t>(rows * width) * 2), w(static_cast<std::size_t>(vocab * width) * 2);
    const DeviceBuffer logits(static_cast<std::size_t>(rows * vocab) * 2);
    ::testing::internal::CaptureStderr();
    lt.gemm(GemmShape{false, true, rows, vocab, width, width, width, vocab}, 1.0f, x.get(), w.get(), 0.0f, logits.get(),
            DType::bf16, DType::bf16, MathMode::strict_f32, nullptr);
    return ::testing::internal::GetCapturedStderr();
  };
  BlasLt lt;
  const std::string first = warning_for(lt, 50257);
  EXPECT_NE(first.find("not a multiple of 16 bytes"), std::string::npos) << first;
  EXPECT_NE(first.find("multiple of 8 elements"), std::string::npos) << first;
  EXPECT_EQ(warning_for(lt, 50259), "") << "warned once";
  BlasLt padded;
  EXPECT_EQ(warning_for(padded, 50304), "");
}

TEST(BlasLtGemmBench, TimesEveryCandidate) {
  RT_SKIP_WITHOUT_GPU();
  BlasLt lt;
  const std::int64_t m = 256, n = 512, k = 384;
  const auto a =
      DeviceBuffer::of_values(test::random_values(static_cast<std::size_t>(m * k), 1, DType::bf16), DType::bf16);
  const auto b =
      DeviceBuffer::of_values(test::random_values(static_cast<std::size_t>(k * n), 2, DType::bf16), DType::bf16);
  const DeviceBuffer c(static_cast<std::size_t>(m * n) * sizeof(float));
  const GemmShape s{false, true, m, n, k, k, k, n};
  const auto ms =
      lt.time_candidates(s, a.get(), b.get(), c.get(), DType::bf16, DType::f32, MathMode::strict_f32, nullptr, 5);
  ASSERT_FALSE(ms.empty());
  EXPECT_LE(ms.size(), 16u);
  for (double t : ms) EXPECT_TRUE(std::isfinite(t) && t > 0.0) << t;
}

// Without a GPU the constructor must fail with a clear Error, not crash.
TEST(BlasLtNoGpu, ConstructorThrowsError) {
  if (test::have_gpu()) GTEST_SKIP() << "a CUDA device is visible";
  test::expect_error_naming([] { BlasLt lt; }, "cublasLtCreate");
}

}  // namespace
}  // namespace ringtrain
