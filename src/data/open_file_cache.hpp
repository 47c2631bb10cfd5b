// Private: the few HDF5 files a stream reader keeps open on its loader thread, each with the one
// dataset it reads (POSIX driver, no MPI); a new file replaces the least recently used one.
// Callers hold h5::lock(), and so does the destructor while it closes them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hdf5/h5_handle.hpp"

namespace ringtrain::data {

class OpenFileCache {
 public:
  struct OpenFile {
    std::size_t index = 0;
    h5::File file;
    h5::Dataset dataset;
    h5::Datatype mem_type;  // native_type_of(dataset)
    std::int64_t last_use = 0;
  };

  // Every file's dataset is the one named `key`.
  explicit OpenFileCache(std::string key);
  ~OpenFileCache();
  OpenFileCache(const OpenFileCache&) = delete;
  OpenFileCache& operator=(const OpenFileCache&) = delete;

  // File `index` of the reader's list (at `path`), opened on first use.
  OpenFile& open(std::size_t index, const std::string& path);

 private:
  std::string key_;
  std::vector<OpenFile> open_;
  std::int64_t uses_ = 0;
};

}  // namespace ringtrain::data
