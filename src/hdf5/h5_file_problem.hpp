// local_file_problem: why a path cannot be opened as an HDF5 file, checked before HDF5 tries
// (whose own message for a missing file or a directory is several lines of internals).
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

}  // namespace ringtrain::h5
