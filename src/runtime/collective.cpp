// run_collectively: one MPI_Allreduce of a failure flag after the step; on failure the
// lowest failing rank broadcasts its message (and whether it was a corrupt file) so every
// rank reports the same line.
#include "ringtrain/runtime/collective.hpp"

#include <climits>
#include <string>
#include <vector>

#include "check/mpi_check.hpp"
#include "runtime/mpi_context.hpp"

namespace ringtrain {

void run_collectively(MPI_Comm comm, const std::function<void()>& step) {
  std::string message;
  bool failed = false;
  int corrupt = 0;
  try {
    step();
  } catch (const CollectiveError&) {
    throw;  // already agreed on by every rank
  } catch (const CorruptFileError& e) {
    failed = true;
    corrupt = 1;
    message = e.what();
  } catch (const std::exception& e) {
    failed = true;
    message = e.what();
  }
  int rank = 0;
  RT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  const int mine = failed ? rank : INT_MAX;
  int first = INT_MAX;
  RT_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == INT_MAX) return;
  int header[2] = {static_cast<int>(message.size()), corrupt};
  RT_MPI_CHECK(MPI_Bcast(header, 2, MPI_INT, first, comm));
  const int length = header[0];
  std::vector<char> text(static_cast<std::size_t>(length));
  if (rank == first) text.assign(message.begin(), message.end());
  RT_MPI_CHECK(MPI_Bcast(text.data(), length, MPI_CHAR, first, comm));
  throw CollectiveError(std::string(text.begin(), text.end()), header[1] != 0);
}

void run_collectively(const Context& ctx, const std::function<void()>& step) {
  run_collectively(world_comm(ctx), step);
}

}  // namespace ringtrain
