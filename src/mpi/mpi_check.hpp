// RT_MPI_CHECK(call): runs an MPI call and throws CommError naming the call, file and line
// with MPI's own error string. Needs MPI_ERRORS_RETURN on the communicator (Context sets it).
#pragma once
#include <mpi.h>

#include <string>

#include "ringtrain/core/error.hpp"

namespace ringtrain::mpi {

[[noreturn]] inline void throw_mpi_error(int code, const char* call, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) len = 0;
  throw CommError(fmt::format("{} failed ({}:{}): {}", call, file, line, std::string(msg, len)));
}

}  // namespace ringtrain::mpi

#define RT_MPI_CHECK(call)                                                                                   \
  do {                                                                                                       \
    const int rt_mpi_rc_ = (call);                                                                           \
    if (rt_mpi_rc_ != MPI_SUCCESS) ::ringtrain::mpi::throw_mpi_error(rt_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)
