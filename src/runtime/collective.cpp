// run_collectively: one MPI_Allreduce of a failure flag after the step; on failure the
// lowest failing rank broadcasts its message (and whether it was a corrupt file) so every
// rank reports the same line. broadcast_text and require_same_on_all_ranks: the agreement on
// values that must be the same on every rank.
#include "ringtrain/runtime/collective.hpp"

#include <algorithm>
#include <climits>
#include <new>
#include <cstdint>
#include <string>
#include <vector>

#include "check/mpi_check.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/runtime/slurm.hpp"
#include "runtime/mpi_context.hpp"

namespace ringtrain {

namespace {
int rank_in(MPI_Comm comm) {
  int rank = 0;
  RT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  return rank;
}
}  // namespace

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
  } catch (const std::bad_alloc& e) {
    failed = true;
    message = fmt::format("out of memory on rank {} (host {})", rank_in(comm), node_name());
    if (const auto* known = dynamic_cast<const HostOutOfMemory*>(&e)) message += " " + known->context();
  } catch (const Error& e) {
    failed = true;
    message = e.what();
  } catch (const std::exception& e) {  // from the system (no thread, no file handle): say where
    failed = true;
    message = fmt::format("{} (rank {}, host {})", e.what(), rank_in(comm), node_name());
  }
  const int rank = rank_in(comm);
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

std::string broadcast_text(const Context& ctx, const std::string& text) {
  std::uint64_t size = text.size();
  RT_MPI_CHECK(MPI_Bcast(&size, 1, MPI_UINT64_T, 0, world_comm(ctx)));
  std::string out = ctx.world_rank() == 0 ? text : std::string(size, '\0');
  // In pieces of at most INT_MAX bytes (MPI counts are int).
  for (std::uint64_t at = 0; at < size;) {
    const int piece = static_cast<int>(std::min<std::uint64_t>(size - at, INT_MAX));
    RT_MPI_CHECK(MPI_Bcast(out.data() + at, piece, MPI_CHAR, 0, world_comm(ctx)));
    at += static_cast<std::uint64_t>(piece);
  }
  return out;
}

void require_same_on_all_ranks(const Context& ctx, const std::string& what, const std::string& value) {
  require_same_on_all_ranks(world_comm(ctx), what, value);
}

void require_same_on_all_ranks(MPI_Comm comm, const std::string& what, const std::string& value) {
  int world = 0;
  RT_MPI_CHECK(MPI_Comm_size(comm, &world));
  const std::uint64_t mine = fnv1a(value.data(), value.size());
  std::vector<std::uint64_t> all(static_cast<std::size_t>(world));
  RT_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm));
  std::vector<int> differ;
  for (int r = 1; r < world; ++r)
    if (all[static_cast<std::size_t>(r)] != all[0]) differ.push_back(r);
  if (differ.empty()) return;
  // Rare and once: every rank's host name, to say where the odd ones run.
  constexpr int kHostBytes = 64;
  std::string host = node_name();
  host.resize(kHostBytes - 1);
  std::vector<char> hosts(static_cast<std::size_t>(world) * kHostBytes);
  RT_MPI_CHECK(MPI_Allgather(host.c_str(), kHostBytes, MPI_CHAR, hosts.data(), kHostBytes, MPI_CHAR, comm));
  const auto host_of = [&](int r) { return std::string(hosts.data() + static_cast<std::size_t>(r) * kHostBytes); };
  std::string ranks = fmt::format("rank {} (host {})", differ.front(), host_of(differ.front()));
  if (differ.size() > 1) ranks += fmt::format(" and {} more rank{}", differ.size() - 1, differ.size() > 2 ? "s" : "");
  throw CollectiveError(fmt::format("{} is not the same on every rank: {} differ{} from rank 0 (host {})", what, ranks,
                                    differ.size() > 1 ? "" : "s", host_of(0)));
}

}  // namespace ringtrain
