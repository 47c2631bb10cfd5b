// The Context every test shares (created once by the MPI-aware gtest main) and helpers for
// tolerances and temporary files.
#pragma once
#include <cmath>
#include <filesystem>
#include <string>

#include "ringtrain/runtime/context.hpp"

namespace ringtrain::test {

Context& context();

// The exit status of a test binary whose cases were all skipped (GNU's "skipped" code); every
// test is registered with it as its SKIP_RETURN_CODE, so ctest counts it as skipped.
inline constexpr int kSkippedExitCode = 77;

// A fresh directory for this test, the same path on every rank (made by rank 0, then a
// barrier); removed by the caller or left for inspection under the build tree.
std::filesystem::path temp_dir(const std::string& name);

// Relative error |a-b| / max(|a|, |b|, tiny).
inline double rel_error(double a, double b) {
  const double scale = std::max({std::fabs(a), std::fabs(b), 1e-30});
  return std::fabs(a - b) / scale;
}

// Tolerances for relative error by dtype (f32 < 1e-5, tf32 < 2e-3, bf16/f16 < 1e-2). tf32 keeps
// 10 of f32's 23 mantissa bits of each input (up to 2^-10 = 9.8e-4 off each when the tensor cores
// truncate): the largest error over an LM head's 16 x 50257 outputs measured 1.2e-3 on an H200.
constexpr double kTolF32 = 1e-5;
constexpr double kTolTf32 = 2e-3;
constexpr double kTolHalf = 1e-2;

}  // namespace ringtrain::test
