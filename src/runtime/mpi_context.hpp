// Private: the MPI handles behind a Context, for the modules (comm, data) that talk MPI.
// Public headers never include mpi.h; modules reach the communicators through this file.
#pragma once
#include <mpi.h>

#include <functional>
#include <string>

#include "ringtrain/runtime/context.hpp"

namespace ringtrain {

struct Context::Impl {
  MPI_Comm world = MPI_COMM_NULL;  // duplicate of MPI_COMM_WORLD, errors return
  MPI_Comm node = MPI_COMM_NULL;   // ranks sharing this node's memory
  bool we_initialized = false;     // finalize only what we initialized
};

inline MPI_Comm world_comm(const Context& ctx) { return ctx.impl().world; }

// run_collectively (collective.hpp) over the ranks of `comm` instead of the whole world.
void run_collectively(MPI_Comm comm, const std::function<void()>& step);
// require_same_on_all_ranks (collective.hpp) over the ranks of `comm`.
void require_same_on_all_ranks(MPI_Comm comm, const std::string& what, const std::string& value);

}  // namespace ringtrain
