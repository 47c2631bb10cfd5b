// blas::sgemm through each library the build has (OpenBLAS; oneDNN), held to one standard: every
// transpose with padded leading dimensions, alpha and beta against a float64 reference; beta = 0
// ignores what C held (NaN included) and k = 0 only scales C; results repeat bit for bit at any
// operand address (ZeRO-3 computes with gathered copies where stage 0 uses the arena) and while
// signals interrupt it (a stop signal may arrive mid-step: oneDNN 2.6.3's JIT GEMM, called without
// its signals blocked, fails this one, with wrong results and a corrupted heap). And the choice of
// library that RINGTRAIN_SGEMM makes.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/random.hpp"
#include "support/signal_storm.hpp"
#include "tensor/blas.hpp"
#include "tensor/onednn_sgemm.hpp"

namespace ringtrain {
namespace {

using blas::SgemmLibrary;

struct Gemm {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  float alpha = 1.0f, beta = 0.0f;
};

// Operands for `g` with random values in [-1, 1) (C too), padding included.
struct Operands {
  std::vector<float> a, b, c;
  Operands(const Gemm& g, std::uint64_t seed) {
    Rng rng(seed);
    auto fill = [&](std::vector<float>& v, std::int64_t size) {
      v.resize(static_cast<std::size_t>(size));
      for (float& x : v) x = 2.0f * rng.uniform() - 1.0f;
    };
    fill(a, (g.trans_a ? g.k : g.m) * g.lda);
    fill(b, (g.trans_b ? g.n : g.k) * g.ldb);
    fill(c, g.m * g.ldc);
  }
};

void run(SgemmLibrary library, const Gemm& g, const float* a, const float* b, float* c) {
  blas::sgemm_with(library, g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, a, g.lda, b, g.ldb, g.beta, c, g.ldc);
}

// The libraries this build has.
std::vector<SgemmLibrary> libraries() {
  std::vector<SgemmLibrary> out{SgemmLibrary::openblas};
  if (blas::onednn::compiled()) out.push_back(SgemmLibrary::onednn);
  return out;
}

class Sgemm : public testing::TestWithParam<SgemmLibrary> {};

std::vector<Gemm> every_transpose(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, float beta) {
  std::vector<Gemm> out;
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      out.push_back(Gemm{ta, tb, m, n, k, (ta ? m : k) + 3, (tb ? k : n) + 5, n + 2, alpha, beta});
  return out;
}

TEST_P(Sgemm, MatchesAFloat64ReferenceForEveryTransposeAlphaAndBeta) {
  std::uint64_t seed = 1;
  for (const auto& [m, n, k] : {std::array<std::int64_t, 3>{1, 1, 1}, {7, 13, 5}, {64, 48, 200}, {130, 3, 257}})
    for (const float alpha : {1.0f, 0.125f})
      for (const float beta : {0.0f, 1.0f, -0.5f})
        for (const Gemm& g : every_transpose(m, n, k, alpha, beta)) {
          Operands o(g, ++seed);
          const std::vector<float> c0 = o.c;
          run(GetParam(), g, o.a.data(), o.b.data(), o.c.data());
          SCOPED_TRACE(testing::Message() << "m " << m << " n " << n << " k " << k << " ta " << g.trans_a << " tb "
                                          << g.trans_b << " alpha " << alpha << " beta " << beta);
          int wrong = 0;
          for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t j = 0; j < g.ldc; ++j) {
              const std::size_t at = static_cast<std::size_t>(i * g.ldc + j);
              if (j >= n) {  // padding between rows: untouched
                wrong += o.c[at] == c0[at] ? 0 : 1;
                continue;
              }
              double sum = 0.0, magnitude = 0.0;
              for (std::int64_t p = 0; p < k; ++p) {
                const double x = o.a[static_cast<std::size_t>(g.trans_a ? p * g.lda + i : i * g.lda + p)];
                const double y = o.b[static_cast<std::size_t>(g.trans_b ? j * g.ldb + p : p * g.ldb + j)];
                sum += x * y;
                magnitude += std::fabs(x * y);
              }
              const double want = alpha * sum + beta * static_cast<double>(c0[at]);
              // The classical float32 bound for a k-term dot product, whatever the summation order.
              const double unit = std::ldexp(1.0, -24);
              const double bound = static_cast<double>(k + 2) * unit * (alpha * magnitude + std::fabs(beta * c0[at]));
              wrong += std::fabs(o.c[at] - want) <= bound ? 0 : 1;
            }
          EXPECT_EQ(wrong, 0);
        }
}

TEST_P(Sgemm, BetaZeroOverwritesNaNAndKZeroOnlyScales) {
  for (const Gemm& g : every_transpose(9, 11, 6, 1.0f, 0.0f)) {
    Operands o(g, 3);
    std::fill(o.c.begin(), o.c.end(), std::numeric_limits<float>::quiet_NaN());
    run(GetParam(), g, o.a.data(), o.b.data(), o.c.data());
    for (std::int64_t i = 0; i < g.m; ++i)
      for (std::int64_t j = 0; j < g.n; ++j) ASSERT_FALSE(std::isnan(o.c[static_cast<std::size_t>(i * g.ldc + j)]));
  }
  for (const float beta : {0.0f, 2.0f}) {
    const Gemm g{false, false, 4, 3, 0, 1, 3, 3, 1.0f, beta};
    std::vector<float> a(4), b(3), c(12, std::numeric_limits<float>::quiet_NaN());
    if (beta != 0.0f) std::fill(c.begin(), c.end(), 1.5f);
    run(GetParam(), g, a.data(), b.data(), c.data());
    for (const float x : c) EXPECT_EQ(x, beta * 1.5f);
  }
}

// The GPT's and the MLP's shapes, each once: inputs, and the product computed first.
struct Case {
  Gemm g;
  Operands o;
  std::vector<float> first;
};

std::vector<Case> model_shaped_cases(SgemmLibrary library) {
  std::vector<Case> cases;
  const std::vector<Gemm> shapes = {{false, true, 256, 768, 256, 256, 256, 768, 1.0f, 1.0f},
                                    {true, false, 768, 256, 256, 768, 256, 256, 1.0f, 0.0f},
                                    {false, false, 256, 256, 768, 768, 256, 256, 1.0f, 0.0f},
                                    {false, true, 128, 128, 64, 768, 768, 128, 0.125f, 0.0f},
                                    {true, false, 128, 64, 128, 128, 256, 768, 1.0f, 0.0f}};
  std::uint64_t seed = 40;
  for (const Gemm& g : shapes) {
    Case c{g, Operands(g, ++seed), {}};
    c.first = c.o.c;
    run(library, g, c.o.a.data(), c.o.b.data(), c.first.data());
    cases.push_back(std::move(c));
  }
  return cases;
}

// Case `c` computed again from copies of its operands placed `shift` floats into fresh buffers.
bool repeats(SgemmLibrary library, const Case& c, std::size_t shift) {
  std::vector<float> a(shift + c.o.a.size()), b(shift + c.o.b.size()), out(shift + c.o.c.size());
  std::copy(c.o.a.begin(), c.o.a.end(), a.begin() + static_cast<std::ptrdiff_t>(shift));
  std::copy(c.o.b.begin(), c.o.b.end(), b.begin() + static_cast<std::ptrdiff_t>(shift));
  std::copy(c.o.c.begin(), c.o.c.end(), out.begin() + static_cast<std::ptrdiff_t>(shift));
  run(library, c.g, a.data() + shift, b.data() + shift, out.data() + shift);
  return std::equal(c.first.begin(), c.first.end(), out.begin() + static_cast<std::ptrdiff_t>(shift));
}

TEST_P(Sgemm, RepeatsBitForBitAtAnyAddress) {
  const std::vector<Case> cases = model_shaped_cases(GetParam());
  for (const Case& c : cases)
    for (const std::size_t shift : {0, 1, 3, 16})
      EXPECT_TRUE(repeats(GetParam(), c, shift)) << "m " << c.g.m << " shift " << shift;
}

TEST_P(Sgemm, GivesTheSameResultsWhileSignalsInterruptIt) {
  const std::vector<Case> cases = model_shaped_cases(GetParam());
  int differing = 0;
  const int signals = test::with_signal_storm(std::chrono::microseconds(100), [&] {
    for (int i = 0; i < 200; ++i)
      differing += repeats(GetParam(), cases[static_cast<std::size_t>(i) % cases.size()], 0) ? 0 : 1;
  });
  EXPECT_EQ(differing, 0);
  EXPECT_GT(signals, 0);
}

// GCC's OpenMP runtime, which oneDNN threads with: weak, as a build without oneDNN does not link it.
extern "C" void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags)
    __attribute__((weak));
extern "C" void omp_set_num_threads(int threads) __attribute__((weak));

// The kernel thread ids of an OpenMP team's master and of its (one) worker.
struct Team {
  pid_t master = 0;
  std::atomic<pid_t> worker{0};
};

// With two threads the sgemm also runs on an OpenMP worker (oneDNN's), where a signal handler
// must not run either, even when the team was made before the first sgemm: here, as a oneDNN
// convolution would, by a parallel region of the thread's own.
TEST_P(Sgemm, GivesTheSameResultsWhileSignalsInterruptItsWorkerThread) {
  if (GOMP_parallel == nullptr || omp_set_num_threads == nullptr) GTEST_SKIP() << "no OpenMP runtime in this build";
  const int threads = blas::threads();
  blas::set_threads(2);
  const std::vector<Case> cases = model_shaped_cases(GetParam());
  int differing = 0, sent = 0;
  std::thread computing([&] {  // a thread with no OpenMP team yet
    Team team;
    team.master = static_cast<pid_t>(syscall(SYS_gettid));
    omp_set_num_threads(2);
    GOMP_parallel(
        [](void* t) {
          auto* team = static_cast<Team*>(t);
          if (const auto me = static_cast<pid_t>(syscall(SYS_gettid)); me != team->master) team->worker = me;
        },
        &team, 2, 0);
    if (team.worker == 0) return;
    sent = test::with_signal_storm_on(team.worker, std::chrono::microseconds(50), [&] {
      for (int i = 0; i < 400; ++i)
        differing += repeats(GetParam(), cases[static_cast<std::size_t>(i) % cases.size()], 0) ? 0 : 1;
    });
  });
  computing.join();
  blas::set_threads(threads);
  EXPECT_EQ(differing, 0);
  EXPECT_GT(sent, 0) << "the OpenMP team had no worker";
}

INSTANTIATE_TEST_SUITE_P(EachLibrary, Sgemm, testing::ValuesIn(libraries()),
                         [](const testing::TestParamInfo<SgemmLibrary>& info) {
                           return info.param == SgemmLibrary::onednn ? "onednn" : "openblas";
                         });

TEST(SgemmLibrary, RingtrainSgemmNamesALibraryOrLeavesTheChoiceToTheMachine) {
  const SgemmLibrary machine =
      blas::onednn::compiled() && blas::onednn::avx512_here() ? SgemmLibrary::onednn : SgemmLibrary::openblas;
  EXPECT_EQ(blas::sgemm_library_for(""), machine);
  EXPECT_EQ(blas::sgemm_library_for("auto"), machine);
  EXPECT_EQ(blas::sgemm_library_for("openblas"), SgemmLibrary::openblas);
  if (blas::onednn::compiled()) {
    EXPECT_EQ(blas::sgemm_library_for("onednn"), SgemmLibrary::onednn);
  } else {
    EXPECT_THROW(blas::sgemm_library_for("onednn"), ConfigError);
  }
  try {
    blas::sgemm_library_for("mkl");
    FAIL() << "an unknown library was accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "RINGTRAIN_SGEMM: unknown library 'mkl' (auto, openblas, onednn)");
  }
}

}  // namespace
}  // namespace ringtrain
