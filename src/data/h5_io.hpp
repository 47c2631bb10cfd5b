// Private: the HDF5 side of the data module: per-file checks and schema, dtype classification,
// and row-range reads (collective in lockstep, or independent). Callers hold h5::lock() when a
// loader thread may be making HDF5 calls at the same time.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "check/h5_check.hpp"
#include "hdf5/h5_handle.hpp"
#include "ringtrain/data/dataset.hpp"

namespace ringtrain::data {

// Largest sample a dataset may hold; a crafted shape beyond it would size absurd allocations.
inline constexpr std::uint64_t kMaxSampleBytes = std::uint64_t{1} << 30;

// What one file holds, checked on its own (rank 4 samples of a supported dtype, at most
// kMaxSampleBytes each, rank 1 integer labels of the same length, not empty). Opens the file
// with the POSIX driver.
struct FileSchema {
  std::int64_t samples = 0;
  std::vector<std::int64_t> sample_dims;  // [C, H, W]
  SampleType type = SampleType::u8;
  std::string type_name;        // as found on disk, e.g. "uint8" or "float16"
  std::string label_type_name;  // e.g. "uint8"
  std::int64_t chunk_rows = 0;  // 0: contiguous
};
FileSchema read_file_schema(const std::string& path, const std::string& images_key, const std::string& labels_key);

// A dataset's dimensions and file type.
struct DatasetShape {
  std::vector<hsize_t> dims;
  h5::Datatype type;
};
DatasetShape shape_of(hid_t dset);

// A file type's name as users know it: "uint8", "int16", "float32", "string", ...
std::string dtype_name(hid_t type);

// The SampleType of a file type, or nothing when ringtrain cannot decode it.
std::optional<SampleType> classify(hid_t type);

// Opens a file read-only with the POSIX driver: independent reads, no MPI.
h5::File open_read_only(const std::string& path);

// The file at `path` as it is now (stat), or the one `file` (opened by open_read_only) is
// (fstat of its descriptor). DataError naming the path when it cannot be asked.
FileStamp stamp_of(const std::string& path);
FileStamp stamp_of(hid_t file, const std::string& path);

// Opens a dataset by key, without a chunk cache; DataError listing the root's contents when
// it is absent.
h5::Dataset open_dataset(hid_t file, const std::string& path, const std::string& key);

// DataError naming the file and dataset when one of `keys` in it would not read back as
// written: compressed with a filter this HDF5 cannot decode, or with storage never written
// (chunks missing: fill values). For after the schema checks, which read metadata only.
void require_readable_storage(const std::string& path, const std::vector<std::string>& keys);

// The in-memory type a sample of this file type is read as: the same class, size and layout
// in native byte order (so the read is a plain copy for little-endian files).
h5::Datatype native_type_of(hid_t dataset);

// Reads rows [row, row + count) of a dataset (leading dimension) into `out` as `mem_type`,
// `rows_per_read` rows per H5Dread. With a collective transfer list every rank of the file's
// communicator must issue the same number of H5Dread calls: pass `rounds` >= the calls this
// range needs, and the extra calls select nothing.
void read_rows(hid_t dset, hid_t mem_type, std::int64_t row, std::int64_t count, std::int64_t rows_per_read, hid_t dxpl,
               std::int64_t rounds, void* out);

// H5Dread calls read_rows needs for `count` rows.
inline std::int64_t read_calls(std::int64_t count, std::int64_t rows_per_read) {
  return (count + rows_per_read - 1) / rows_per_read;
}

}  // namespace ringtrain::data
