// RT_MPI_CHECK(call): runs an MPI call and throws CommError (check.hpp's message) with MPI's
// own error string. Needs MPI_ERRORS_RETURN on the communicator (Context sets it).
#pragma once
#include <mpi.h>

#include <string>

#include "check/check.hpp"

namespace ringtrain::check {

inline void mpi(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  fail<CommError>(call, file, line, std::string(text, static_cast<std::size_t>(len)));
}

}  // namespace ringtrain::check

#define RT_MPI_CHECK(call) ::ringtrain::check::mpi((call), #call, __FILE__, __LINE__)
