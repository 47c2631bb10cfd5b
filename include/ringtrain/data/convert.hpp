// `ringtrain data convert`: IDX images + labels -> one HDF5 file in ringtrain's dataset
// schema: `images` uint8 [N, C, H, W] and `labels` uint8 [N], chunked, with attributes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ringtrain {

struct ConvertOptions {
  std::string images_path;               // IDX(.gz) with dims [N, H, W] or [N, C, H, W]
  std::string labels_path;               // IDX(.gz) with dims [N]
  std::string output_path;               // .h5 file written (atomically: temp name + rename)
  std::vector<std::string> class_names;  // stored as attribute `classes`; may be empty
  std::int64_t chunk_samples = 1024;     // samples per HDF5 chunk
};

struct ConvertResult {
  std::int64_t samples = 0;
  std::vector<std::int64_t> sample_shape;  // [C, H, W]
};

// Single-process (serial HDF5 driver). Throws DataError / IoError naming the file.
ConvertResult convert_idx_to_hdf5(const ConvertOptions& options);

// The ten Fashion-MNIST class names, in label order.
const std::vector<std::string>& fashion_mnist_classes();

}  // namespace ringtrain
