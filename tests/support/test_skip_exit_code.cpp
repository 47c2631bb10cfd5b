// The test main's exit code for skips: a run whose cases all skipped exits kSkippedExitCode
// (ctest: skipped), a run with any passing case exits 0. Run through the script in
// tests/support/CMakeLists.txt with each filter; the cases themselves only pass or skip.
#include <gtest/gtest.h>

namespace {

TEST(SkipExitCode, Passes) { SUCCEED(); }

TEST(SkipExitCode, Skips) { GTEST_SKIP() << "a case that always skips"; }

}  // namespace
