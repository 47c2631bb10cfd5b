// Test helpers that write HDF5 dataset files (serial driver): any sample dtype, contiguous or
// chunked, optionally deflate-compressed, with sample values that identify their sample; and
// ways to damage a file (truncate it, overwrite bytes) for the error tests.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include "check/h5_check.hpp"
#include "hdf5/h5_handle.hpp"

namespace ringtrain::test {

// Element j of sample i: an integer in [0, 255] that differs between neighbours and samples.
inline double sample_value(std::int64_t i, std::int64_t j) {
  return static_cast<double>((i * 37 + j * 11 + j / 7) % 256);
}

// n samples of `numel` elements each, converted to T (integers wrap: 200 is -56 as int8; a
// double converted straight to an integer type that cannot hold it is undefined behaviour).
template <typename T>
std::vector<T> sample_values(std::int64_t first, std::int64_t n, std::int64_t numel) {
  std::vector<T> v(static_cast<std::size_t>(n * numel));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < numel; ++j) {
      const double value = sample_value(first + i, j);
      T& out = v[static_cast<std::size_t>(i * numel + j)];
      if constexpr (std::is_integral_v<T>)
        out = static_cast<T>(static_cast<std::int64_t>(value));
      else
        out = static_cast<T>(value);
    }
  return v;
}

// The label of global sample i in these tests.
inline std::uint8_t label_of(std::int64_t i) { return static_cast<std::uint8_t>((i * 7 + 3) % 10); }

class H5FileWriter {
 public:
  explicit H5FileWriter(const std::string& path)
      : where_(path), file_(RT_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT))) {}

  // chunk_rows 0: contiguous; otherwise chunks of chunk_rows leading rows (whole samples).
  template <typename T>
  void add(const char* name, hid_t file_type, hid_t mem_type, const std::vector<hsize_t>& dims,
           const std::vector<T>& data, hsize_t chunk_rows = 0, bool deflate = false) {
    h5::Dataspace space(RT_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
    h5::PropList dcpl(RT_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
    if (chunk_rows > 0) {
      std::vector<hsize_t> chunk = dims;
      chunk[0] = chunk_rows;
      RT_H5_CHECK(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()));
      if (deflate) RT_H5_CHECK(H5Pset_deflate(dcpl, 1));
    }
    h5::Dataset d(RT_H5_CHECK(H5Dcreate2(file_, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
    if (!data.empty()) RT_H5_CHECK(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()));
  }

  // A dataset of shape `dims` with nothing written: chunks of one element hold any shape and
  // none is stored, so a file can declare shapes far too large to write. `filter` (> 0): an
  // optional filter of that id in the pipeline (one this HDF5 need not know).
  void declare(const char* name, hid_t file_type, const std::vector<hsize_t>& dims, H5Z_filter_t filter = 0) {
    h5::Dataspace space(RT_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
    h5::PropList dcpl(RT_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
    const std::vector<hsize_t> ones(dims.size(), 1);
    RT_H5_CHECK(H5Pset_chunk(dcpl, static_cast<int>(ones.size()), ones.data()));
    if (filter > 0) RT_H5_CHECK(H5Pset_filter(dcpl, filter, H5Z_FLAG_OPTIONAL, 0, nullptr));
    h5::Dataset d(RT_H5_CHECK(H5Dcreate2(file_, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  }

  // A virtual dataset of shape `dims` mapping all of it to `source_dataset` (same shape) in
  // `source_file`, which need not exist.
  void add_virtual(const char* name, hid_t file_type, const std::vector<hsize_t>& dims, const char* source_file,
                   const char* source_dataset) {
    h5::Dataspace space(RT_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
    h5::Dataspace source(RT_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
    h5::PropList dcpl(RT_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
    RT_H5_CHECK(H5Pset_virtual(dcpl, space, source_file, source_dataset, source));
    h5::Dataset d(RT_H5_CHECK(H5Dcreate2(file_, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  }

  // Samples [first, first + dims[0]) by sample_values, of element type T on disk as file_type,
  // and their labels (label_of) as uint8, chunked alike.
  template <typename T>
  void samples(std::int64_t first, const std::vector<hsize_t>& dims, hid_t file_type, hid_t mem_type,
               hsize_t chunk_rows = 0, bool deflate = false) {
    std::int64_t numel = 1;
    for (std::size_t d = 1; d < dims.size(); ++d) numel *= static_cast<std::int64_t>(dims[d]);
    const auto n = static_cast<std::int64_t>(dims[0]);
    add("images", file_type, mem_type, dims, sample_values<T>(first, n, numel), chunk_rows, deflate);
    std::vector<std::uint8_t> labels(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) labels[static_cast<std::size_t>(i)] = label_of(first + i);
    add("labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {dims[0]}, labels, chunk_rows);
  }

  // Closes the file now (a file must be closed before others read or damage it).
  void close() { file_.reset(); }
  hid_t file() const { return file_; }  // for writes of the caller's own

 private:
  h5::ErrorContext where_;
  h5::File file_;
};

// uint8 samples [first, first + n) of shape [c, h, w] in one file, chunked by chunk_rows.
inline void write_u8_file(const std::string& path, std::int64_t first, std::int64_t n, std::int64_t c, std::int64_t h,
                          std::int64_t w, hsize_t chunk_rows = 0, bool deflate = false) {
  H5FileWriter wr(path);
  wr.samples<std::uint8_t>(
      first, {static_cast<hsize_t>(n), static_cast<hsize_t>(c), static_cast<hsize_t>(h), static_cast<hsize_t>(w)},
      H5T_STD_U8LE, H5T_NATIVE_UINT8, chunk_rows, deflate);
}

// IEEE binary16, little-endian (HDF5 1.10 has no predefined half type).
inline h5::Datatype half_type() {
  h5::Datatype t(RT_H5_CHECK(H5Tcopy(H5T_IEEE_F32LE)));
  RT_H5_CHECK(H5Tset_fields(t, 15, 10, 5, 0, 10));
  RT_H5_CHECK(H5Tset_size(t, 2));
  RT_H5_CHECK(H5Tset_precision(t, 16));
  RT_H5_CHECK(H5Tset_ebias(t, 15));
  return t;
}

// Byte offset in the file of the stored chunk that starts at leading row `row` (to damage it).
inline haddr_t chunk_address(const std::string& path, const char* name, hsize_t row) {
  h5::ErrorContext where(path);
  h5::File file(RT_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)));
  h5::Dataset d(RT_H5_CHECK(H5Dopen2(file, name, H5P_DEFAULT)));
  h5::Dataspace space(RT_H5_CHECK(H5Dget_space(d)));
  std::vector<hsize_t> offset(static_cast<std::size_t>(RT_H5_CHECK(H5Sget_simple_extent_ndims(space))), 0);
  offset[0] = row;
  haddr_t address = HADDR_UNDEF;
  RT_H5_CHECK(H5Dget_chunk_info_by_coord(d, offset.data(), nullptr, &address, nullptr));
  return address;
}

inline void overwrite_bytes(const std::string& path, std::uint64_t offset, std::size_t count, char value) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  const std::string bytes(count, value);
  f.write(bytes.data(), static_cast<std::streamsize>(count));
}

inline void truncate_file(const std::string& path, std::uintmax_t keep) { std::filesystem::resize_file(path, keep); }

}  // namespace ringtrain::test
