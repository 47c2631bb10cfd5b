// Private: Dataset::open with the world and node communicators passed in, so that tests can
// split one machine into several "nodes" and exercise the exchange between them (the same for
// TokenDataset); and the steps of opening that image and token datasets share.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/h5_io.hpp"
#include "data/node_memory.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/data/dataset.hpp"
#include "ringtrain/data/sampler.hpp"
#include "ringtrain/data/tokens.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "runtime/mpi_context.hpp"

namespace ringtrain::data {

std::shared_ptr<const Dataset> open_dataset(MPI_Comm world, MPI_Comm node, const DatasetSpec& spec);

// TokenDataset::open with the communicators passed in, as open_dataset.
std::shared_ptr<const TokenDataset> open_token_dataset(MPI_Comm world, MPI_Comm node, const TokenDatasetSpec& spec);

// Files and glob patterns (a pattern expands to its matches, sorted), in order. DataError when
// the list is empty, a pattern matches nothing, or a file is listed twice.
std::vector<std::string> expand_sources(const std::vector<std::string>& sources);

// Runs fn on every rank of comm; a failure on any rank becomes the lowest failing rank's
// DataError on all of them (callers prefix it with the config key, as for one rank's errors).
template <typename F>
void agreed(MPI_Comm comm, F&& fn) {
  try {
    run_collectively(comm, std::forward<F>(fn));
  } catch (const CollectiveError& e) {
    throw DataError(e.what());
  }
}

// [begin, end) of a file's rows that a global range covers.
struct Rows {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t count() const { return end - begin; }
};
inline Rows rows_in(std::int64_t first, std::int64_t rows, Shard range) {
  const std::int64_t b = std::clamp(range.begin - first, std::int64_t{0}, rows);
  const std::int64_t e = std::clamp(range.end - first, std::int64_t{0}, rows);
  return Rows{b, std::max(b, e)};
}

inline std::int64_t row_count(const DatasetFile& f) { return f.samples; }
inline std::int64_t row_count(const TokenFile& f) { return f.tokens; }

// Every rank must see the same files (DatasetFile or TokenFile): same paths, byte sizes and rows,
// and the same `schema` (sample shape and type, vocabulary, ...). A rank that sees
// another file under the same path (a node-local copy, a file being rewritten) would
// otherwise read other data or size a collective differently; a DataError names the ranks.
template <typename File>
void require_same_files(MPI_Comm world, const std::vector<File>& files, const std::string& schema) {
  std::string text = schema + "\n";
  for (const File& f : files) {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(f.path, ec);
    text += fmt::format("{} {} {}\n", f.path, ec ? -1 : static_cast<std::int64_t>(bytes), row_count(f));
  }
  agreed(world, [&] {
    require_same_on_all_ranks(world, "the dataset's files (paths, byte sizes, rows, sample shape and type)", text);
  });
}

// fn(f, rows, file) for each file f (DatasetFile or TokenFile) with rows in `shard`, in order:
// `file` is f opened for independent reads (POSIX driver), under an ErrorContext naming it.
// Callers hold h5::lock().
template <typename File, typename Fn>
void for_each_file_in_shard(const std::vector<File>& files, Shard shard, Fn&& fn) {
  for (const File& f : files) {
    const Rows rows = rows_in(f.first, row_count(f), shard);
    if (rows.count() == 0) continue;
    h5::ErrorContext where(f.path);
    const h5::File file = open_read_only(f.path);
    fn(f, rows, file);
  }
}

// The memory strategy's node copy (items of `item_bytes`): this rank backs its part `shard`
// with memory before reading into it, every rank of world agreeing that it worked (a DataError
// naming `path` otherwise).
void populate_shard(MPI_Comm world, const NodeSharedBuffer& copy, Shard shard, std::int64_t item_bytes,
                    const std::string& path);

// Once every rank has read its shard: fills each node's copy of `items` items with the other
// nodes' parts, every write visible to all of the node's ranks after it.
void complete_node_copy(MPI_Comm world, const NodeOrder& order, const NodeSharedBuffer& copy, std::int64_t items,
                        std::int64_t item_bytes);

}  // namespace ringtrain::data
