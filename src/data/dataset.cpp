// InMemoryDataset::load: cheap per-rank checks (agreed on by all ranks before any collective
// call, so one rank's missing file cannot leave its peers inside a collective open), then a
// collective MPI-IO open, schema validation and collective reads of both datasets.
#include "ringtrain/data/dataset.hpp"

#include <algorithm>
#include <climits>
#include <filesystem>

#include <fmt/ranges.h>

#include "hdf5/h5_check.hpp"
#include "mpi/mpi_check.hpp"
#include "ringtrain/core/error.hpp"
#include "runtime/mpi_context.hpp"

namespace ringtrain {
namespace {

// Every rank throws the lowest failing rank's message, or none throws.
void agree_or_throw(MPI_Comm comm, int rank, const std::string& failure) {
  const int mine = failure.empty() ? INT_MAX : rank;
  int first = INT_MAX;
  RT_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == INT_MAX) return;
  int length = static_cast<int>(failure.size());
  RT_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, first, comm));
  std::string text = failure;
  text.resize(static_cast<std::size_t>(length));
  RT_MPI_CHECK(MPI_Bcast(text.data(), length, MPI_CHAR, first, comm));
  throw DataError(text);
}

// "" when the file looks loadable from this rank, else the reason.
std::string local_file_problem(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return fmt::format("{}: no such file", path);
  if (fs::is_directory(path, ec)) return fmt::format("{}: is a directory, not an HDF5 file", path);
  h5::ErrorContext where(path);
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 < 0) return fmt::format("{}: cannot read: {}", path, h5::innermost_error());
  if (is_hdf5 == 0) return fmt::format("{}: not an HDF5 file", path);
  return {};
}

std::vector<std::string> root_links(hid_t file) {
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  RT_H5_CHECK(H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &names));
  return names;
}

// Opens a dataset by key, with a message that lists the root's contents when it is absent.
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
               type == H5I_GROUP ? "group" : type == H5I_DATATYPE ? "named datatype" : "non-dataset object");
  }
  return h5::Dataset(RT_H5_CHECK(H5Dopen2(file, key.c_str(), H5P_DEFAULT)));
}

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

struct DatasetInfo {
  std::vector<hsize_t> dims;
  H5T_class_t type_class = H5T_NO_CLASS;
  std::string type_name;
  bool is_uint8 = false;
};

DatasetInfo describe(hid_t dset) {
  DatasetInfo info;
  h5::Dataspace space(RT_H5_CHECK(H5Dget_space(dset)));
  const int rank = RT_H5_CHECK(H5Sget_simple_extent_ndims(space));
  info.dims.resize(static_cast<std::size_t>(rank));
  RT_H5_CHECK(H5Sget_simple_extent_dims(space, info.dims.data(), nullptr));
  h5::Datatype type(RT_H5_CHECK(H5Dget_type(dset)));
  info.type_class = H5Tget_class(type);
  info.type_name = dtype_name(type);
  info.is_uint8 = info.type_class == H5T_INTEGER && H5Tget_size(type) == 1 && H5Tget_sign(type) == H5T_SGN_NONE;
  return info;
}

// MPI-IO counts are ints: whatever the spec asks, one read call stays well below 2 GiB.
constexpr std::int64_t kReadBlockCap = std::int64_t{1} << 30;

// Collective read of a whole dataset in blocks of leading-dimension rows.
template <typename T>
void read_rows(hid_t dset, hid_t mem_type, const std::vector<hsize_t>& dims, hid_t dxpl, std::int64_t max_bytes,
               T* out) {
  hsize_t row_elems = 1;
  for (std::size_t d = 1; d < dims.size(); ++d) row_elems *= dims[d];
  const auto block_bytes = static_cast<hsize_t>(std::min(max_bytes, kReadBlockCap));
  const hsize_t rows_per_read = std::max<hsize_t>(1, block_bytes / (row_elems * sizeof(T)));
  h5::Dataspace file_space(RT_H5_CHECK(H5Dget_space(dset)));
  std::vector<hsize_t> start(dims.size(), 0);
  std::vector<hsize_t> count = dims;
  for (hsize_t row = 0; row < dims[0]; row += rows_per_read) {
    start[0] = row;
    count[0] = std::min(rows_per_read, dims[0] - row);
    RT_H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr));
    const hsize_t elems = count[0] * row_elems;
    h5::Dataspace mem_space(RT_H5_CHECK(H5Screate_simple(1, &elems, nullptr)));
    RT_H5_CHECK(H5Dread(dset, mem_type, mem_space, file_space, dxpl, out + row * row_elems));
  }
}

}  // namespace

InMemoryDataset InMemoryDataset::load(const Context& ctx, const DatasetSpec& spec, int num_classes) {
  const std::string& path = spec.path;
  RT_REQUIRE(num_classes > 0, DataError, "{}: num_classes must be > 0, got {}", path, num_classes);
  RT_REQUIRE(spec.read_block_bytes > 0, DataError, "{}: read_block_bytes must be > 0, got {}", path,
             spec.read_block_bytes);
  const MPI_Comm comm = world_comm(ctx);
  agree_or_throw(comm, ctx.world_rank(), local_file_problem(path));

  h5::ErrorContext where(path);
  h5::PropList fapl(RT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  RT_H5_CHECK(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
  h5::File file(RT_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl)));

  const h5::Dataset images = open_dataset(file, path, spec.images_key);
  const h5::Dataset labels = open_dataset(file, path, spec.labels_key);
  const DatasetInfo im = describe(images);
  const DatasetInfo lb = describe(labels);
  const std::string& ik = spec.images_key;
  const std::string& lk = spec.labels_key;

  RT_REQUIRE(im.dims.size() == 4, DataError, "{}: dataset '{}' has rank {} [{}], expected 4 [N, C, H, W]", path,
             ik, im.dims.size(), fmt::join(im.dims, ", "));
  RT_REQUIRE(im.is_uint8, DataError, "{}: dataset '{}' has unsupported dtype {} (supported: uint8)", path, ik,
             im.type_name);
  RT_REQUIRE(lb.dims.size() == 1, DataError, "{}: dataset '{}' has rank {} [{}], expected 1 [N]", path, lk,
             lb.dims.size(), fmt::join(lb.dims, ", "));
  RT_REQUIRE(lb.type_class == H5T_INTEGER, DataError,
             "{}: dataset '{}' has unsupported dtype {} (supported: integer types)", path, lk, lb.type_name);
  RT_REQUIRE(im.dims[0] == lb.dims[0], DataError, "{}: dataset '{}' has {} samples but '{}' has {}", path, ik,
             im.dims[0], lk, lb.dims[0]);
  RT_REQUIRE(im.dims[0] > 0, DataError, "{}: dataset '{}' is empty (0 samples)", path, ik);
  RT_REQUIRE(im.dims[1] > 0 && im.dims[2] > 0 && im.dims[3] > 0, DataError,
             "{}: dataset '{}' has an empty sample shape [{}, {}, {}]", path, ik, im.dims[1], im.dims[2],
             im.dims[3]);

  h5::PropList dxpl(RT_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
  RT_H5_CHECK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));

  InMemoryDataset ds;
  ds.path_ = path;
  ds.size_ = static_cast<std::int64_t>(im.dims[0]);
  ds.sample_shape_ = Shape({static_cast<std::int64_t>(im.dims[1]), static_cast<std::int64_t>(im.dims[2]),
                            static_cast<std::int64_t>(im.dims[3])});

  // Labels first: they are small, and a bad label should not cost a full image read.
  ds.labels_.resize(static_cast<std::size_t>(ds.size_));
  read_rows(labels, H5T_NATIVE_INT32, lb.dims, dxpl, spec.read_block_bytes, ds.labels_.data());
  const auto bad = std::find_if(ds.labels_.begin(), ds.labels_.end(),
                                [&](std::int32_t v) { return v < 0 || v >= num_classes; });
  RT_REQUIRE(bad == ds.labels_.end(), DataError, "{}: dataset '{}': value {} at index {} is outside [0, {})",
             path, lk, bad == ds.labels_.end() ? 0 : *bad, bad - ds.labels_.begin(), num_classes);

  ds.images_.resize(static_cast<std::size_t>(ds.size_ * ds.sample_numel()));
  read_rows(images, H5T_NATIVE_UINT8, im.dims, dxpl, spec.read_block_bytes, ds.images_.data());
  return ds;
}

}  // namespace ringtrain
