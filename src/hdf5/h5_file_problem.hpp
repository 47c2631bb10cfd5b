// local_file_problem: why a path cannot be opened as an HDF5 file, checked before HDF5 tries
// (whose own message for a missing file or a directory is several lines of internals); and
// open_read_only_file, whose error for a damaged file is HDF5's reason alone.
#pragma once
#include <filesystem>
#include <string>

#include "check/h5_check.hpp"

namespace ringtrain::h5 {

// "" when the file exists, is not a directory and has an HDF5 signature, else the reason
// ("PATH: no such file", ...).
inline std::string local_file_problem(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return fmt::format("{}: no such file", path);
  if (fs::is_directory(path, ec)) return fmt::format("{}: is a directory, not an HDF5 file", path);
  const ErrorContext where(path);
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 < 0) return fmt::format("{}: cannot read: {}", path, innermost_error());
  if (is_hdf5 == 0) return fmt::format("{}: not an HDF5 file", path);
  return {};
}

// H5Fopen(path, read-only, fapl). A file HDF5 cannot open (truncated, damaged) throws
// DataError "PATH: HDF5 cannot open it: <its reason>": a user's message, without the call.
inline hid_t open_read_only_file(const std::string& path, hid_t fapl) {
  const ErrorContext where(path);
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  if (id < 0) throw DataError(fmt::format("{}: HDF5 cannot open it: {}", path, innermost_error()));
  return id;
}

}  // namespace ringtrain::h5
