// NodeOrder, NodeSharedBuffer and the exchange between node leaders (see header).
#include "data/node_memory.hpp"

#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <exception>
#include <numeric>
#include <utility>

#include "check/mpi_check.hpp"
#include "data/dataset_open.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/runtime/slurm.hpp"

namespace ringtrain::data {

NodeOrder node_order(MPI_Comm world, MPI_Comm node) {
  int world_rank = 0, world_size = 0, local_rank = 0;
  RT_MPI_CHECK(MPI_Comm_rank(world, &world_rank));
  RT_MPI_CHECK(MPI_Comm_size(world, &world_size));
  RT_MPI_CHECK(MPI_Comm_rank(node, &local_rank));
  int mine[2] = {world_rank, local_rank};  // (node's lowest world rank, local rank)
  RT_MPI_CHECK(MPI_Allreduce(&world_rank, &mine[0], 1, MPI_INT, MPI_MIN, node));
  std::vector<int> all(2 * static_cast<std::size_t>(world_size));
  RT_MPI_CHECK(MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, world));

  std::vector<int> ranks(static_cast<std::size_t>(world_size));
  std::iota(ranks.begin(), ranks.end(), 0);
  auto key = [&](int r) {
    const std::size_t i = 2 * static_cast<std::size_t>(r);
    return std::pair(all[i], all[i + 1]);
  };
  std::sort(ranks.begin(), ranks.end(), [&](int a, int b) { return key(a) < key(b); });
  NodeOrder order;
  order.positions.resize(ranks.size());
  for (int p = 0; p < world_size; ++p) {
    const int r = ranks[static_cast<std::size_t>(p)];
    order.positions[static_cast<std::size_t>(r)] = p;
    if (p == 0 || key(r).first != key(ranks[static_cast<std::size_t>(p - 1)]).first) order.node_begin.push_back(p);
  }
  order.node_begin.push_back(world_size);
  order.position = order.positions[static_cast<std::size_t>(world_rank)];
  order.node = static_cast<int>(std::upper_bound(order.node_begin.begin(), order.node_begin.end(), order.position) -
                                order.node_begin.begin()) -
               1;
  order.leader = local_rank == 0;
  return order;
}

namespace {

// Where MPI implementations back node-shared windows (Open MPI's shmem_mmap_backing_file_base_dir
// and MPICH's default): a window larger than its free space is a SIGBUS at the first touch of a
// missing page, or (Open MPI) a failure on the node's first rank that leaves the others waiting.
constexpr const char* kShmDir = "/dev/shm";

// "" when `bytes` (and a MiB for the MPI library's own bookkeeping) fit in kShmDir's free space
// (or it cannot be asked), else why not.
std::string shm_room_for(std::size_t bytes) {
  struct statvfs fs {};
  if (::statvfs(kShmDir, &fs) != 0) return {};
  const std::uint64_t free_bytes = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (free_bytes >= bytes + (std::uint64_t{1} << 20)) return {};
  return fmt::format(
      "the dataset needs {} MiB of node-shared memory but {} on {} has {} MiB free (data.strategy = \"stream\" "
      "reads while training instead)",
      (bytes + (1u << 20) - 1) >> 20, kShmDir, node_name(), free_bytes >> 20);
}

}  // namespace

NodeSharedBuffer::NodeSharedBuffer(MPI_Comm world, MPI_Comm node, std::size_t bytes, const std::string& path) {
  int local_rank = 0;
  RT_MPI_CHECK(MPI_Comm_rank(node, &local_rank));
  // Checked on the node's first rank, which allocates, and agreed by all ranks of all nodes.
  const std::string no_room = local_rank == 0 ? shm_room_for(bytes) : std::string();
  agreed(world, [&] { RT_REQUIRE(no_room.empty(), DataError, "{}: {}", path, no_room); });
  // All memory on local rank 0, so the node's copy is one contiguous block.
  void* mine = nullptr;
  RT_MPI_CHECK(MPI_Win_allocate_shared(static_cast<MPI_Aint>(local_rank == 0 ? bytes : 0), 1, MPI_INFO_NULL, node,
                                       static_cast<void*>(&mine), &win_));
  MPI_Aint size = 0;
  int unit = 0;
  void* base = nullptr;
  RT_MPI_CHECK(MPI_Win_shared_query(win_, 0, &size, &unit, static_cast<void*>(&base)));
  base_ = static_cast<std::byte*>(base);
  RT_MPI_CHECK(MPI_Win_fence(0, win_));
}

NodeSharedBuffer::~NodeSharedBuffer() {
  if (win_ != MPI_WIN_NULL && std::uncaught_exceptions() == 0) MPI_Win_free(&win_);
}

std::string NodeSharedBuffer::populate(std::size_t offset, std::size_t bytes) const {
  if (bytes == 0) return {};
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  // Round down to the page by pointer arithmetic, not an integer-to-pointer cast.
  std::byte* const first = base_ + offset;
  std::byte* const begin = first - reinterpret_cast<std::uintptr_t>(first) % page;
  const auto length = static_cast<std::size_t>(first + bytes - begin);
  if (::madvise(begin, length, MADV_POPULATE_WRITE) == 0) return {};
  // Kernels before 5.14 do not know the advice: the pages then come one fault at a time.
  if (errno == EINVAL) return {};
  return fmt::format(
      "cannot back {} MiB of node-shared memory for the dataset: {} (data.strategy = \"stream\" "
      "reads while training instead)",
      bytes >> 20, std::strerror(errno));
}

void NodeSharedBuffer::fence() const {
  MPI_Win win = win_;
  RT_MPI_CHECK(MPI_Win_fence(0, win));
}

void exchange_between_nodes(MPI_Comm world, const NodeOrder& order, std::byte* data,
                            const std::vector<std::int64_t>& part_begin, std::int64_t unit_bytes) {
  const int nodes = static_cast<int>(order.node_begin.size()) - 1;
  if (nodes == 1) return;
  // Checked on every rank before any rank splits off, so all ranks fail alike.
  std::vector<int> counts(static_cast<std::size_t>(nodes)), displs(counts.size());
  for (int k = 0; k < nodes; ++k) {
    const std::int64_t begin = part_begin[static_cast<std::size_t>(k)];
    const std::int64_t count = part_begin[static_cast<std::size_t>(k) + 1] - begin;
    RT_REQUIRE(begin <= INT_MAX && count <= INT_MAX, DataError,
               "memory strategy: more than {} samples per node exchange; use data.strategy = \"stream\"", INT_MAX);
    counts[static_cast<std::size_t>(k)] = static_cast<int>(count);
    displs[static_cast<std::size_t>(k)] = static_cast<int>(begin);
  }
  MPI_Comm leaders = MPI_COMM_NULL;
  RT_MPI_CHECK(MPI_Comm_split(world, order.leader ? 0 : MPI_UNDEFINED, order.node, &leaders));
  if (!order.leader) return;
  MPI_Datatype unit = MPI_DATATYPE_NULL;
  RT_MPI_CHECK(MPI_Type_contiguous(static_cast<int>(unit_bytes), MPI_BYTE, &unit));
  RT_MPI_CHECK(MPI_Type_commit(&unit));
  RT_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(), displs.data(), unit, leaders));
  RT_MPI_CHECK(MPI_Type_free(&unit));
  RT_MPI_CHECK(MPI_Comm_free(&leaders));
}

}  // namespace ringtrain::data
