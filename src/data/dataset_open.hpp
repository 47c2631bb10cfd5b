// Private: Dataset::open with the world and node communicators passed in, so that tests can
// split one machine into several "nodes" and exercise the exchange between them; and the
// expansion of a source list that image and token datasets share. The same for TokenDataset.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "ringtrain/data/dataset.hpp"
#include "ringtrain/data/tokens.hpp"

namespace ringtrain::data {

std::shared_ptr<const Dataset> open_dataset(MPI_Comm world, MPI_Comm node, const DatasetSpec& spec);

// Files and glob patterns (a pattern expands to its matches, sorted), in order. DataError when
// the list is empty, a pattern matches nothing, or a file is listed twice.
std::vector<std::string> expand_sources(const std::vector<std::string>& sources);

// TokenDataset::open with the communicators passed in, as open_dataset.
std::shared_ptr<const TokenDataset> open_token_dataset(MPI_Comm world, MPI_Comm node, const TokenDatasetSpec& spec);

}  // namespace ringtrain::data
