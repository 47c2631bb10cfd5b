// GoogleTest main for every ringtrain test: one Context (MPI) for the process, gtest output
// from rank 0 only (other ranks print their failures), and an exit code agreed by all ranks
// so a failure on any rank fails the test under mpirun. A binary whose cases were all skipped
// (a GPU test without a GPU) exits kSkippedExitCode, which ctest reports as skipped, not passed.
#include <gtest/gtest.h>
#include <mpi.h>

#include "test_context.hpp"

namespace ringtrain::test {
namespace {
Context* g_context = nullptr;

// Non-zero ranks: print only failed assertions, prefixed by the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};
}  // namespace

Context& context() { return *g_context; }

std::filesystem::path temp_dir(const std::string& name) {
  const auto base = std::filesystem::temp_directory_path() / "ringtrain-tests";
  const char* job = std::getenv("OMPI_COMM_WORLD_SIZE");
  auto dir = base / (name + "-np" + (job ? job : "1") + "-" + std::to_string(::getppid()));
  if (g_context->world_rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

}  // namespace ringtrain::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ringtrain::Context ctx(&argc, &argv);
  ringtrain::test::g_context = &ctx;
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (ctx.world_rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new ringtrain::test::FailurePrinter(ctx.world_rank()));
  }
  const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  const int all_skipped = unit.skipped_test_count() > 0 && unit.successful_test_count() == 0 ? 1 : 0;
  int any_failed = 0, skipped_everywhere = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&all_skipped, &skipped_everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (any_failed != 0) return 1;
  return skipped_everywhere != 0 ? ringtrain::test::kSkippedExitCode : 0;
}
