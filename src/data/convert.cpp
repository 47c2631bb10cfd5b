// convert_idx_to_hdf5: IDX pair -> ringtrain dataset file (format "ringtrain-dataset" v1),
// written with the serial driver under `<output>.tmp`, fsynced, then renamed into place so a
// reader never sees a half-written file under the final name.
#include "ringtrain/data/convert.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/ranges.h>

#include "hdf5/h5_attributes.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/files.hpp"
#include "ringtrain/core/version.hpp"
#include "ringtrain/data/idx.hpp"

namespace ringtrain {
namespace {

constexpr const char* kFormatName = "ringtrain-dataset";
constexpr int kFormatVersion = 1;
// HDF5 refuses chunks of 4 GiB or more.
constexpr std::uint64_t kMaxChunkBytes = (std::uint64_t{1} << 32) - 1;

void write_u8_dataset(hid_t file, const char* name, const std::vector<hsize_t>& dims, const std::vector<hsize_t>& chunk,
                      const std::uint8_t* data) {
  const int rank = static_cast<int>(dims.size());
  h5::Dataspace space(RT_H5_CHECK(H5Screate_simple(rank, dims.data(), nullptr)));
  h5::PropList dcpl(RT_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  RT_H5_CHECK(H5Pset_chunk(dcpl, rank, chunk.data()));
  // Every byte gets written right away, so pre-filling chunks would only double the I/O.
  RT_H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
  h5::Dataset dset(RT_H5_CHECK(H5Dcreate2(file, name, H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  RT_H5_CHECK(H5Dwrite(dset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
}

}  // namespace

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

ConvertResult convert_idx_to_hdf5(const ConvertOptions& options) {
  const std::string out_path = output_file(options.output_path);
  RT_REQUIRE(options.chunk_samples > 0, DataError, "{}: chunk_samples must be > 0, got {}", out_path,
             options.chunk_samples);
  require_output_is_not_an_input(out_path, {options.images_path, options.labels_path});
  const IdxArray images = read_idx(options.images_path);
  const IdxArray labels = read_idx(options.labels_path);

  RT_REQUIRE(images.dims.size() == 3 || images.dims.size() == 4, DataError,
             "{}: images need dims [N, H, W] or [N, C, H, W], got [{}]", options.images_path,
             fmt::join(images.dims, ", "));
  RT_REQUIRE(labels.dims.size() == 1, DataError, "{}: labels need dims [N], got [{}]", options.labels_path,
             fmt::join(labels.dims, ", "));
  const std::int64_t n = images.dims[0];
  RT_REQUIRE(labels.dims[0] == n, DataError, "{} has {} labels but {} has {} images", options.labels_path,
             labels.dims[0], options.images_path, n);
  RT_REQUIRE(n > 0, DataError, "{}: no samples", options.images_path);

  std::vector<std::int64_t> sample(images.dims.begin() + 1, images.dims.end());
  if (sample.size() == 2) sample.insert(sample.begin(), 1);  // grayscale [H, W] -> [1, H, W]
  std::uint64_t sample_bytes = 1;
  for (const auto d : sample) sample_bytes *= static_cast<std::uint64_t>(d);
  RT_REQUIRE(sample_bytes > 0, DataError, "{}: empty sample shape [{}]", options.images_path, fmt::join(sample, ", "));
  RT_REQUIRE(sample_bytes <= kMaxChunkBytes, DataError, "{}: one sample is {} bytes, more than an HDF5 chunk can hold",
             options.images_path, sample_bytes);

  int num_classes = 0;
  if (options.class_names.empty()) {
    num_classes = 1 + *std::max_element(labels.data.begin(), labels.data.end());
  } else {
    num_classes = static_cast<int>(options.class_names.size());
    for (std::size_t i = 0; i < labels.data.size(); ++i)
      RT_REQUIRE(labels.data[i] < num_classes, DataError,
                 "{}: label {} at index {} has no class name ({} classes given)", options.labels_path, labels.data[i],
                 i, num_classes);
  }

  namespace fs = std::filesystem;
  create_parent_directories(out_path);
  std::error_code ec;
  const std::string tmp_path = out_path + ".tmp";
  fs::remove(tmp_path, ec);  // a stale temp from an interrupted run

  try {
    h5::ErrorContext where(out_path);
    h5::File file(RT_H5_CHECK(H5Fcreate(tmp_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)));
    const auto chunk_n =
        static_cast<hsize_t>(std::min<std::uint64_t>({static_cast<std::uint64_t>(options.chunk_samples),
                                                      static_cast<std::uint64_t>(n), kMaxChunkBytes / sample_bytes}));
    std::vector<hsize_t> dims4 = {static_cast<hsize_t>(n)};
    std::vector<hsize_t> chunk4 = {chunk_n};
    for (const auto d : sample) {
      dims4.push_back(static_cast<hsize_t>(d));
      chunk4.push_back(static_cast<hsize_t>(d));
    }
    write_u8_dataset(file, "images", dims4, chunk4, images.data.data());
    // Same samples per chunk as images: chunk i of both holds the same samples.
    write_u8_dataset(file, "labels", {static_cast<hsize_t>(n)}, {chunk_n}, labels.data.data());

    h5::write_string_attr(file, "format", {kFormatName}, true);
    h5::write_attr<std::int32_t>(file, "format_version", kFormatVersion);
    h5::write_string_attr(file, "writer", {std::string("ringtrain ") + version()}, true);
    h5::write_string_attr(file, "source", {options.images_path, options.labels_path}, false);
    if (!options.class_names.empty()) h5::write_string_attr(file, "classes", options.class_names, false);
    h5::write_attr<std::int32_t>(file, "num_classes", num_classes);
    RT_H5_CHECK(file.close());

    fsync_path(tmp_path, false);
    fs::rename(tmp_path, out_path, ec);
    RT_REQUIRE(!ec, IoError, "{}: cannot rename {} into place: {}", out_path, tmp_path, ec.message());
    fsync_path(fs::absolute(fs::path(out_path)).parent_path().string(), true);
  } catch (...) {
    fs::remove(tmp_path, ec);
    throw;
  }

  ConvertResult result;
  result.samples = n;
  result.sample_shape = sample;
  return result;
}

}  // namespace ringtrain
