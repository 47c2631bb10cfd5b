// Private: the few HDF5 files a stream reader keeps open on its loader thread, each with the one
// dataset it reads (POSIX driver, no MPI); a new file replaces the least recently used one.
// Every use checks that the file is still the one the run opened (its FileStamp) and that the
// dataset still has the shape and type the reads are sized by: a file rewritten during a run
// is a DataError, never mixed data or an overflowing read. Callers hold h5::lock(), and so does
// the destructor while it closes them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hdf5/h5_handle.hpp"
#include "ringtrain/data/dataset.hpp"

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

  // What the dataset of a file must be: `dims` (rows first) of `type`, in a file with `stamp`.
  struct Expected {
    FileStamp stamp;
    std::vector<std::int64_t> dims;
    SampleType type;
  };

  // File `index` of the reader's list (at `path`), opened on first use.
  OpenFile& open(std::size_t index, const std::string& path, const Expected& expected);

 private:
  // DataError naming `path` unless the open `file` still has the stamp `expected`.
  static void check_unchanged(hid_t file, const std::string& path, const FileStamp& expected);

  std::string key_;
  std::vector<OpenFile> open_;
  std::int64_t uses_ = 0;
};

}  // namespace ringtrain::data
