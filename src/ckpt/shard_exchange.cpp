// exchange_ranges (see header): the ranks share their range lists, then an MPI_Alltoallv per
// window of the logical buffer moves every intersection of a sender's `from` and a receiver's
// `to` within it. Both sides walk that intersection in arena order, so the packed send and
// receive orders agree without a header.
#include "ckpt/shard_exchange.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "check/mpi_check.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::ckpt {
namespace {

// Every rank's ranges, indexed by rank.
std::vector<std::vector<ArenaRange>> allgather_ranges(MPI_Comm comm, const std::vector<ArenaRange>& mine) {
  int world = 0;
  RT_MPI_CHECK(MPI_Comm_size(comm, &world));
  const int count = static_cast<int>(mine.size() * 2);
  std::vector<int> counts(static_cast<std::size_t>(world)), displs(static_cast<std::size_t>(world));
  RT_MPI_CHECK(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm));
  std::int64_t total = 0;
  for (int r = 0; r < world; ++r) {
    displs[static_cast<std::size_t>(r)] = static_cast<int>(total);
    total += counts[static_cast<std::size_t>(r)];
  }
  std::vector<std::int64_t> flat_mine;
  for (const ArenaRange& a : mine) flat_mine.insert(flat_mine.end(), {a.offset, a.count});
  std::vector<std::int64_t> flat(static_cast<std::size_t>(total));
  RT_MPI_CHECK(MPI_Allgatherv(flat_mine.data(), count, MPI_INT64_T, flat.data(), counts.data(), displs.data(),
                              MPI_INT64_T, comm));
  std::vector<std::vector<ArenaRange>> all(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r)
    for (int i = 0; i < counts[static_cast<std::size_t>(r)]; i += 2) {
      const std::size_t at =
          static_cast<std::size_t>(displs[static_cast<std::size_t>(r)]) + static_cast<std::size_t>(i);
      all[static_cast<std::size_t>(r)].push_back({flat[at], flat[at + 1]});
    }
  return all;
}

// The parts of sorted ranges within [begin, end).
std::vector<ArenaRange> clip(const std::vector<ArenaRange>& ranges, std::int64_t begin, std::int64_t end) {
  std::vector<ArenaRange> out;
  for (const ArenaRange& r : ranges) {
    const std::int64_t a = std::max(begin, r.offset), b = std::min(end, r.end());
    if (a < b) out.push_back({a, b - a});
  }
  return out;
}

int as_mpi_count(std::int64_t n) {
  RT_REQUIRE(n <= INT_MAX, Error, "checkpoint: a shard exchange of {} elements exceeds MPI's int counts", n);
  return static_cast<int>(n);
}

}  // namespace

void exchange_ranges(MPI_Comm comm, const std::vector<ArenaRange>& from, const float* src,
                     const std::vector<ArenaRange>& to, float* dst, std::int64_t window) {
  const std::vector<std::vector<ArenaRange>> froms = allgather_ranges(comm, from);
  const std::vector<std::vector<ArenaRange>> tos = allgather_ranges(comm, to);
  const std::size_t world = froms.size();
  std::int64_t received = 0, end = 0;  // end: of the logical buffer, the same on every rank
  for (std::size_t s = 0; s < world; ++s) {
    for_each_owned(froms[s], to, [&](std::int64_t, std::int64_t, std::int64_t n) { received += n; });
    for (const auto* list : {&froms[s], &tos[s]})
      if (!list->empty()) end = std::max(end, list->back().end());
  }
  // Each element of `to` must arrive exactly once: the ranks agree before anything moves.
  int covered = received == total_count(to) ? 1 : 0, all_covered = 0;
  RT_MPI_CHECK(MPI_Allreduce(&covered, &all_covered, 1, MPI_INT, MPI_MIN, comm));
  RT_REQUIRE(all_covered == 1, Error, "checkpoint: the ranks' shards do not cover the buffer exactly once");
  std::vector<int> send_counts(world), send_displs(world), recv_counts(world), recv_displs(world);
  std::vector<float> send, recv;
  std::vector<std::vector<ArenaRange>> to_part(world), from_part(world);
  RT_REQUIRE(window > 0, Error, "exchange_ranges: window must be > 0, got {}", window);
  for (std::int64_t begin = 0; begin < end; begin += window) {  // one window of the buffer per round
    const std::int64_t window_end = std::min(end, begin + window);
    send.clear();
    for (std::size_t d = 0; d < world; ++d) {  // what rank d wants of mine in the window, in arena order
      to_part[d] = clip(tos[d], begin, window_end);
      send_displs[d] = as_mpi_count(static_cast<std::int64_t>(send.size()));
      for_each_owned(to_part[d], from, [&](std::int64_t, std::int64_t packed, std::int64_t n) {
        send.insert(send.end(), src + packed, src + packed + n);
      });
      send_counts[d] = as_mpi_count(static_cast<std::int64_t>(send.size())) - send_displs[d];
    }
    std::int64_t arriving = 0;
    for (std::size_t s = 0; s < world; ++s) {  // what rank s holds of mine in the window, in the same order
      from_part[s] = clip(froms[s], begin, window_end);
      recv_displs[s] = as_mpi_count(arriving);
      for_each_owned(from_part[s], to, [&](std::int64_t, std::int64_t, std::int64_t n) { arriving += n; });
      recv_counts[s] = as_mpi_count(arriving) - recv_displs[s];
    }
    recv.resize(static_cast<std::size_t>(arriving));
    RT_MPI_CHECK(MPI_Alltoallv(send.data(), send_counts.data(), send_displs.data(), MPI_FLOAT, recv.data(),
                               recv_counts.data(), recv_displs.data(), MPI_FLOAT, comm));
    std::size_t at = 0;
    for (std::size_t s = 0; s < world; ++s)
      for_each_owned(from_part[s], to, [&](std::int64_t, std::int64_t packed, std::int64_t n) {
        std::copy_n(recv.data() + at, n, dst + packed);
        at += static_cast<std::size_t>(n);
      });
  }
}

}  // namespace ringtrain::ckpt
