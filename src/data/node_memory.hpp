// Private: ranks ordered node by node, and memory shared by the ranks of a node (an MPI-3
// shared window), for the memory strategy: each rank reads its shard into its node's single
// copy of the dataset, then one rank per node swaps the node's part with the other nodes.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ringtrain::data {

// Ranks ordered node by node (nodes by their lowest world rank, ranks by local rank), so that
// the shards of one node's ranks form one contiguous range.
struct NodeOrder {
  int position = 0;             // this rank's place in that order
  std::vector<int> positions;   // every world rank's place
  int node = 0;                 // this rank's node, counted in that order
  std::vector<int> node_begin;  // first place of each node, then the world size
  bool leader = false;          // local rank 0 of its node
};
NodeOrder node_order(MPI_Comm world, MPI_Comm node);

// `bytes` of memory shared by the ranks of `node` (collective over `world`: a node whose
// /dev/shm has no room for them is a DataError naming `path` on every rank). Freed collectively on
// destruction, except while an exception unwinds: a failing rank must not wait in MPI_Win_free
// for peers that are elsewhere (the job is then ending anyway).
class NodeSharedBuffer {
 public:
  NodeSharedBuffer(MPI_Comm world, MPI_Comm node, std::size_t bytes, const std::string& path);
  ~NodeSharedBuffer();
  NodeSharedBuffer(const NodeSharedBuffer&) = delete;
  NodeSharedBuffer& operator=(const NodeSharedBuffer&) = delete;

  std::byte* data() const { return base_; }
  // Backs bytes [offset, offset + bytes) with memory now (one call instead of a page fault per
  // page during the reads), so that a node short of shared memory gives an error message
  // here instead of SIGBUS at some write later. "" on success, else the reason.
  std::string populate(std::size_t offset, std::size_t bytes) const;
  // Collective over the node: every rank's writes so far are visible to all after it.
  void fence() const;

 private:
  MPI_Win win_ = MPI_WIN_NULL;
  std::byte* base_ = nullptr;
};

// Every node's leader sends its node's part [part_begin[k], part_begin[k + 1]) (in units of
// `unit_bytes`) of `data` to the other leaders, so each node's copy ends complete. Called by
// every rank of world; only leaders move data.
void exchange_between_nodes(MPI_Comm world, const NodeOrder& order, std::byte* data,
                            const std::vector<std::int64_t>& part_begin, std::int64_t unit_bytes);

}  // namespace ringtrain::data
