// Helpers for MPI tests where rank 0 does something alone (writes or damages files): its
// outcome is shared with every rank, so a failure there fails the test everywhere and no
// rank is left waiting in the next collective call.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

#include <functional>
#include <string>

namespace ringtrain::test {

// Runs fn on rank 0 only, then tells every rank whether it worked (an exception, or a new
// gtest failure on rank 0).
inline ::testing::AssertionResult on_root(const std::function<void()>& fn) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string error;
  if (rank == 0) {
    const bool failed_before = ::testing::Test::HasFailure();
    try {
      fn();
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (error.empty() && !failed_before && ::testing::Test::HasFailure()) error = "assertion failed on rank 0";
  }
  int length = static_cast<int>(error.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  error.resize(static_cast<std::size_t>(length));
  MPI_Bcast(error.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (error.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "rank 0: " << error;
}

// True on every rank when every rank passed the same text.
inline bool same_on_all_ranks(const std::string& text) {
  std::string root = text;
  int length = static_cast<int>(root.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  root.resize(static_cast<std::size_t>(length));
  MPI_Bcast(root.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  int mine = root == text ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

}  // namespace ringtrain::test
