// The opening steps image and token datasets share (see dataset_open.hpp): the expansion of
// the source list, and the node copy of the memory strategy.
#include "data/dataset_open.hpp"

#include <glob.h>

#include <set>

namespace ringtrain::data {

std::vector<std::string> expand_sources(const std::vector<std::string>& sources) {
  RT_REQUIRE(!sources.empty(), DataError, "no dataset files given");
  std::vector<std::string> paths;
  for (const auto& source : sources) {
    if (source.find_first_of("*?[") == std::string::npos) {
      paths.push_back(source);
      continue;
    }
    glob_t found{};
    const int rc = glob(source.c_str(), GLOB_ERR, nullptr, &found);
    for (std::size_t i = 0; rc == 0 && i < found.gl_pathc; ++i) paths.emplace_back(found.gl_pathv[i]);
    globfree(&found);
    RT_REQUIRE(rc != GLOB_NOMATCH, DataError, "{}: no files match", source);
    RT_REQUIRE(rc == 0, DataError, "{}: cannot expand the pattern ({})", source,
               rc == GLOB_ABORTED ? "a directory could not be read" : "out of memory");
  }
  std::set<std::string> seen;
  for (const auto& p : paths) RT_REQUIRE(seen.insert(p).second, DataError, "{}: listed more than once", p);
  return paths;
}

void populate_shard(MPI_Comm world, const NodeSharedBuffer& copy, Shard shard, std::int64_t item_bytes,
                    const std::string& path) {
  const auto ib = static_cast<std::size_t>(item_bytes);
  const std::string failure =
      copy.populate(static_cast<std::size_t>(shard.begin) * ib, static_cast<std::size_t>(shard.end - shard.begin) * ib);
  agreed(world, [&] { RT_REQUIRE(failure.empty(), DataError, "{}: {}", path, failure); });
}

void complete_node_copy(MPI_Comm world, const NodeOrder& order, const NodeSharedBuffer& copy, std::int64_t items,
                        std::int64_t item_bytes) {
  const int world_size = order.node_begin.back();
  copy.fence();
  std::vector<std::int64_t> part_begin;
  part_begin.reserve(order.node_begin.size());
  for (const int p : order.node_begin)
    part_begin.push_back(p == world_size ? items : even_shard(items, world_size, p).begin);
  exchange_between_nodes(world, order, copy.data(), part_begin, item_bytes);
  copy.fence();
}

}  // namespace ringtrain::data

namespace ringtrain {

std::int64_t dataset_file_bytes(const std::vector<std::string>& sources) {
  std::int64_t bytes = 0;
  try {
    for (const std::string& path : data::expand_sources(sources)) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(path, ec);
      if (!ec) bytes += static_cast<std::int64_t>(size);
    }
  } catch (const DataError&) {
    return 0;  // no files to list: opening the dataset reports it
  }
  return bytes;
}

}  // namespace ringtrain
