// Private: Dataset::open with the world and node communicators passed in, so that tests can
// split one machine into several "nodes" and exercise the exchange between them.
#pragma once
#include <mpi.h>

#include <memory>

#include "ringtrain/data/dataset.hpp"

namespace ringtrain::data {

std::shared_ptr<const Dataset> open_dataset(MPI_Comm world, MPI_Comm node, const DatasetSpec& spec);

}  // namespace ringtrain::data
