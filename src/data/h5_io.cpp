// HDF5 helpers of the data module (see header). Every message names the file and, where it
// applies, the dataset key; HDF5's own failures come through RT_H5_CHECK with its innermost
// message.
#include "data/h5_io.hpp"

#include <fmt/ranges.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "hdf5/h5_file_problem.hpp"
#include "ringtrain/core/bytes.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/printable.hpp"

namespace ringtrain::data {
namespace {

std::vector<std::string> root_links(hid_t file) {
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  RT_H5_CHECK(H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &names));
  return names;
}

// IEEE binary16/32/64 only: other float layouts (bfloat16, vendor formats) would need their
// own decoders.
bool is_ieee_float(hid_t type, std::size_t spos, std::size_t epos, std::size_t esize, std::size_t msize) {
  std::size_t s = 0, ep = 0, es = 0, mp = 0, ms = 0;
  if (H5Tget_fields(type, &s, &ep, &es, &mp, &ms) < 0) return false;
  return s == spos && ep == epos && es == esize && mp == 0 && ms == msize;
}

}  // namespace

std::string dtype_name(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t bits = 8 * H5Tget_size(type);
  switch (cls) {
    case H5T_INTEGER: return fmt::format("{}int{}", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", bits);
    case H5T_FLOAT: return fmt::format("float{}", bits);
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "vlen";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_REFERENCE: return "reference";
    default: return "unknown";
  }
}

std::optional<SampleType> classify(hid_t type) {
  const std::size_t size = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: {
      const bool u = H5Tget_sign(type) == H5T_SGN_NONE;
      if (H5Tget_precision(type) != 8 * size) return std::nullopt;
      switch (size) {
        case 1: return u ? SampleType::u8 : SampleType::i8;
        case 2: return u ? SampleType::u16 : SampleType::i16;
        case 4: return u ? SampleType::u32 : SampleType::i32;
        case 8: return u ? SampleType::u64 : SampleType::i64;
        default: return std::nullopt;
      }
    }
    case H5T_FLOAT:
      if (size == 2 && is_ieee_float(type, 15, 10, 5, 10)) return SampleType::f16;
      if (size == 4 && is_ieee_float(type, 31, 23, 8, 23)) return SampleType::f32;
      if (size == 8 && is_ieee_float(type, 63, 52, 11, 52)) return SampleType::f64;
      return std::nullopt;
    default: return std::nullopt;
  }
}

DatasetShape shape_of(hid_t dset) {
  DatasetShape info;
  h5::Dataspace space(RT_H5_CHECK(H5Dget_space(dset)));
  const int rank = RT_H5_CHECK(H5Sget_simple_extent_ndims(space));
  info.dims.resize(static_cast<std::size_t>(rank));
  RT_H5_CHECK(H5Sget_simple_extent_dims(space, info.dims.data(), nullptr));
  info.type = h5::Datatype(RT_H5_CHECK(H5Dget_type(dset)));
  return info;
}

namespace {

std::int64_t chunk_rows_of(hid_t dset) {
  h5::PropList dcpl(RT_H5_CHECK(H5Dget_create_plist(dset)));
  if (RT_H5_CHECK(H5Pget_layout(dcpl)) != H5D_CHUNKED) return 0;
  hsize_t chunk[H5S_MAX_RANK] = {};
  RT_H5_CHECK(H5Pget_chunk(dcpl, H5S_MAX_RANK, chunk));
  return static_cast<std::int64_t>(chunk[0]);
}

}  // namespace

h5::Dataset open_dataset(hid_t file, const std::string& path, const std::string& key) {
  // H5Lexists fails (rather than answering false) when an intermediate group is missing,
  // so walk the key one component at a time.
  bool present = !key.empty();
  for (std::size_t pos = 0; present && pos != std::string::npos;) {
    pos = key.find('/', pos + 1);
    const std::string prefix = key.substr(0, pos);
    present = RT_H5_CHECK(H5Lexists(file, prefix.c_str(), H5P_DEFAULT)) > 0;
  }
  if (!present) {
    const auto found = root_links(file);
    throw DataError(fmt::format("{}: dataset '{}' missing (found: {})", path, key,
                                found.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(found, ", "))));
  }
  {
    h5::Handle<H5Oclose> object(RT_H5_CHECK(H5Oopen(file, key.c_str(), H5P_DEFAULT)));
    const H5I_type_t type = H5Iget_type(object);
    RT_REQUIRE(type == H5I_DATASET, DataError, "{}: '{}' is a {}, not a dataset", path, key,
               type == H5I_GROUP      ? "group"
               : type == H5I_DATATYPE ? "named datatype"
                                      : "non-dataset object");
  }
  // No chunk cache: reads here cover whole chunks and never come back to one, and a chunk
  // that fits the cache would be read into it and copied out again (plus a fresh allocation
  // per chunk) instead of straight into our buffer.
  h5::PropList dapl(RT_H5_CHECK(H5Pcreate(H5P_DATASET_ACCESS)));
  RT_H5_CHECK(H5Pset_chunk_cache(dapl, 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT));
  return h5::Dataset(RT_H5_CHECK(H5Dopen2(file, key.c_str(), dapl)));
}

namespace {

// A virtual dataset's source files, where HDF5 looks for them (an absolute name; else beside
// the virtual dataset's file, or in the working directory): a missing one reads as fill
// values without a word. Not judged under HDF5_VDS_PREFIX or for printf-style names (%b).
void require_virtual_sources(hid_t dcpl, const std::string& path, const std::string& key) {
  if (std::getenv("HDF5_VDS_PREFIX") != nullptr) return;
  std::size_t count = 0;
  RT_H5_CHECK(H5Pget_virtual_count(dcpl, &count));
  for (std::size_t i = 0; i < count; ++i) {
    const ssize_t length = RT_H5_CHECK(H5Pget_virtual_filename(dcpl, i, nullptr, 0));
    std::string name(static_cast<std::size_t>(length) + 1, '\0');
    RT_H5_CHECK(H5Pget_virtual_filename(dcpl, i, name.data(), name.size()));
    name.resize(static_cast<std::size_t>(length));
    if (name == "." || name.find('%') != std::string::npos) continue;
    const std::filesystem::path source(name);
    std::error_code ec;
    const bool found = source.is_absolute()
                           ? std::filesystem::exists(source, ec)
                           : std::filesystem::exists(std::filesystem::path(path).parent_path() / source, ec) ||
                                 std::filesystem::exists(source, ec);
    RT_REQUIRE(found, DataError,
               "{}: dataset '{}' is virtual and its source file '{}' is missing: its samples would read as fill values",
               path, key, printable(name));
  }
}

// A dataset whose stored bytes would not read back as what was written: compressed by a filter
// this HDF5 cannot decode (h5py's LZF, a plugin: it failed only at the first read, mid-run on
// the stream strategy), or with chunks never written (a writer that stopped, an extent grown
// past the data), which HDF5 reads as fill values without a word; for a virtual one, a missing
// source file.
void require_stored(hid_t dset, const std::string& path, const std::string& key) {
  const h5::PropList dcpl(RT_H5_CHECK(H5Dget_create_plist(dset)));
  const int filters = RT_H5_CHECK(H5Pget_nfilters(dcpl));
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0, config = 0;
    std::size_t values = 0;
    std::array<char, 64> name{};
    const H5Z_filter_t id = RT_H5_CHECK(
        H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &values, nullptr, name.size(), name.data(), &config));
    RT_REQUIRE(H5Zfilter_avail(id) > 0, DataError,
               "{}: dataset '{}' is compressed with HDF5 filter {} ({}), which this HDF5 cannot decode (a plugin "
               "filter needs HDF5_PLUGIN_PATH); rewrite it uncompressed or with gzip",
               path, key, id, printable(name.data()));
  }
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  if (layout == H5D_VIRTUAL) return require_virtual_sources(dcpl, path, key);
  if (layout != H5D_CHUNKED && layout != H5D_CONTIGUOUS) return;
  const std::vector<hsize_t> dims = shape_of(dset).dims;
  if (std::find(dims.begin(), dims.end(), hsize_t{0}) != dims.end()) return;  // empty: nothing to store
  bool whole = false;
  if (layout == H5D_CHUNKED) {  // every chunk the extent covers is stored (compressed ones are smaller)
    std::vector<hsize_t> chunk(dims.size());
    RT_H5_CHECK(H5Pget_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()));
    hsize_t expected = 1, stored = 0;
    for (std::size_t d = 0; d < dims.size(); ++d) expected *= (dims[d] + chunk[d] - 1) / chunk[d];
    const h5::Dataspace space(RT_H5_CHECK(H5Dget_space(dset)));
    RT_H5_CHECK(H5Dget_num_chunks(dset, space, &stored));
    whole = stored == expected;
  } else {
    H5D_space_status_t status{};
    RT_H5_CHECK(H5Dget_space_status(dset, &status));
    whole = status == H5D_SPACE_STATUS_ALLOCATED;
  }
  RT_REQUIRE(whole, DataError,
             "{}: dataset '{}' is not all written: some of its chunks were never stored and would read as fill values "
             "(a writer that stopped early, or an extent grown past the data)",
             path, key);
}

}  // namespace

h5::File open_read_only(const std::string& path) {
  h5::PropList fapl(RT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  RT_H5_CHECK(H5Pset_fapl_sec2(fapl));
  return h5::File(h5::open_read_only_file(path, fapl));
}

void require_readable_storage(const std::string& path, const std::vector<std::string>& keys) {
  const h5::File file = open_read_only(path);
  for (const std::string& key : keys) require_stored(open_dataset(file, path, key), path, key);
}

namespace {
FileStamp stamp_from(const struct stat& st) {
  return FileStamp{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
                   static_cast<std::int64_t>(st.st_size),
                   static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}
}  // namespace

FileStamp stamp_of(const std::string& path) {
  struct stat st {};
  RT_REQUIRE(::stat(path.c_str(), &st) == 0, DataError, "{}: cannot stat: {}", path, std::strerror(errno));
  return stamp_from(st);
}

FileStamp stamp_of(hid_t file, const std::string& path) {
  void* handle = nullptr;
  RT_H5_CHECK(H5Fget_vfd_handle(file, H5P_DEFAULT, &handle));
  struct stat st {};
  RT_REQUIRE(handle != nullptr && ::fstat(*static_cast<int*>(handle), &st) == 0, DataError, "{}: cannot stat: {}", path,
             std::strerror(errno));
  return stamp_from(st);
}

FileSchema read_file_schema(const std::string& path, const std::string& images_key, const std::string& labels_key) {
  h5::ErrorContext where(path);
  const h5::File file = open_read_only(path);
  const h5::Dataset images = open_dataset(file, path, images_key);
  const h5::Dataset labels = open_dataset(file, path, labels_key);
  const DatasetShape im = shape_of(images);
  const DatasetShape lb = shape_of(labels);
  const std::string& ik = images_key;
  const std::string& lk = labels_key;

  FileSchema s;
  s.type_name = dtype_name(im.type);
  s.label_type_name = dtype_name(lb.type);
  RT_REQUIRE(im.dims.size() == 4, DataError, "{}: dataset '{}' has rank {} [{}], expected 4 [N, C, H, W]", path, ik,
             im.dims.size(), fmt::join(im.dims, ", "));
  const std::optional<SampleType> type = classify(im.type);
  RT_REQUIRE(type.has_value(), DataError,
             "{}: dataset '{}' has unsupported dtype {} (supported: uint8/16/32/64, int8/16/32/64, IEEE "
             "float16/32/64)",
             path, ik, s.type_name);
  RT_REQUIRE(lb.dims.size() == 1, DataError, "{}: dataset '{}' has rank {} [{}], expected 1 [N]", path, lk,
             lb.dims.size(), fmt::join(lb.dims, ", "));
  RT_REQUIRE(H5Tget_class(lb.type) == H5T_INTEGER, DataError,
             "{}: dataset '{}' has unsupported dtype {} (supported: integer types)", path, lk, s.label_type_name);
  RT_REQUIRE(im.dims[0] == lb.dims[0], DataError, "{}: dataset '{}' has {} samples but '{}' has {}", path, ik,
             im.dims[0], lk, lb.dims[0]);
  RT_REQUIRE(im.dims[0] > 0, DataError, "{}: dataset '{}' is empty (0 samples)", path, ik);
  RT_REQUIRE(im.dims[1] > 0 && im.dims[2] > 0 && im.dims[3] > 0, DataError,
             "{}: dataset '{}' has an empty sample shape [{}, {}, {}]", path, ik, im.dims[1], im.dims[2], im.dims[3]);
  // The shape sizes allocations and byte offsets: a sample is at most kMaxSampleBytes and every
  // sample's offset fits int64 (a crafted shape must not overflow either).
  std::uint64_t sample_bytes = sample_type_size(*type);
  bool overflow = false;
  for (std::size_t d = 1; d < 4; ++d) overflow |= __builtin_mul_overflow(sample_bytes, im.dims[d], &sample_bytes);
  RT_REQUIRE(!overflow && sample_bytes <= kMaxSampleBytes, DataError,
             "{}: dataset '{}' has samples of [{}, {}, {}] {}, more than {} each", path, ik, im.dims[1], im.dims[2],
             im.dims[3], s.type_name, format_bytes(static_cast<double>(kMaxSampleBytes)));
  RT_REQUIRE(im.dims[0] <= static_cast<std::uint64_t>(INT64_MAX) / sample_bytes, DataError,
             "{}: dataset '{}' holds {} samples of {} bytes, more than a 64-bit offset reaches", path, ik, im.dims[0],
             sample_bytes);
  s.samples = static_cast<std::int64_t>(im.dims[0]);
  s.sample_dims = {static_cast<std::int64_t>(im.dims[1]), static_cast<std::int64_t>(im.dims[2]),
                   static_cast<std::int64_t>(im.dims[3])};
  s.type = *type;
  s.chunk_rows = chunk_rows_of(images);
  return s;
}

h5::Datatype native_type_of(hid_t dataset) {
  h5::Datatype file_type(RT_H5_CHECK(H5Dget_type(dataset)));
  h5::Datatype mem(RT_H5_CHECK(H5Tcopy(file_type)));
  RT_H5_CHECK(H5Tset_order(mem, RT_H5_CHECK(H5Tget_order(H5T_NATIVE_INT))));
  return mem;
}

void read_rows(hid_t dset, hid_t mem_type, std::int64_t row, std::int64_t count, std::int64_t rows_per_read, hid_t dxpl,
               std::int64_t rounds, void* out) {
  h5::Dataspace file_space(RT_H5_CHECK(H5Dget_space(dset)));
  const int rank = RT_H5_CHECK(H5Sget_simple_extent_ndims(file_space));
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  RT_H5_CHECK(H5Sget_simple_extent_dims(file_space, dims.data(), nullptr));
  hsize_t row_elems = 1;
  for (std::size_t d = 1; d < dims.size(); ++d) row_elems *= dims[d];
  const std::size_t row_bytes = row_elems * H5Tget_size(mem_type);
  std::vector<hsize_t> start(dims.size(), 0);
  std::vector<hsize_t> block = dims;
  for (std::int64_t call = 0; call < rounds; ++call) {
    const std::int64_t done = call * rows_per_read;
    const std::int64_t n = std::clamp<std::int64_t>(count - done, 0, rows_per_read);
    // The memory space has the selection's own shape: HDF5 then maps chunks by whole
    // hyperslabs; a flat memory space makes it walk the selection element by element.
    start[0] = static_cast<hsize_t>(row) + static_cast<hsize_t>(done);
    block[0] = static_cast<hsize_t>(std::max<std::int64_t>(n, 1));
    h5::Dataspace mem_space(RT_H5_CHECK(H5Screate_simple(rank, block.data(), nullptr)));
    if (n == 0) {  // an empty selection still takes part in the collective call
      RT_H5_CHECK(H5Sselect_none(file_space));
      RT_H5_CHECK(H5Sselect_none(mem_space));
    } else {
      RT_H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, block.data(), nullptr));
    }
    std::byte none{};  // HDF5 wants a buffer even when nothing is selected
    auto* dst = n == 0 ? &none : static_cast<std::byte*>(out) + static_cast<std::size_t>(done) * row_bytes;
    RT_H5_CHECK(H5Dread(dset, mem_type, mem_space, file_space, dxpl, dst));
  }
}

}  // namespace ringtrain::data
