// A labelled image dataset from one HDF5 file, read collectively with the MPI-IO driver and
// held in memory (uint8 images [N, C, H, W], int32 labels [N]). Validated at load: every
// problem is a DataError naming the file and the dataset.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

class Context;

struct DatasetSpec {
  std::string path;
  std::string images_key = "images";
  std::string labels_key = "labels";
  // Most bytes one collective read moves (whole samples, at least one): keeps MPI-IO counts
  // far below INT_MAX and bounds the temporary buffers MPI-IO allocates.
  std::int64_t read_block_bytes = std::int64_t{64} << 20;
};

class InMemoryDataset {
 public:
  // Collective over ctx's world: every rank calls it with the same spec. Labels must lie in
  // [0, num_classes).
  static InMemoryDataset load(const Context& ctx, const DatasetSpec& spec, int num_classes);

  std::int64_t size() const { return size_; }
  const Shape& sample_shape() const { return sample_shape_; }  // [C, H, W]
  std::int64_t sample_numel() const { return sample_shape_.numel(); }
  const std::uint8_t* image(std::int64_t i) const { return images_.data() + i * sample_numel(); }
  std::int32_t label(std::int64_t i) const { return labels_[static_cast<std::size_t>(i)]; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::int64_t size_ = 0;
  Shape sample_shape_;
  std::vector<std::uint8_t> images_;
  std::vector<std::int32_t> labels_;
};

}  // namespace ringtrain
