// BlockReader (see header). Blocks are whole HDF5 chunks (except at a rank's part boundaries),
// so each read maps to whole chunks and HDF5 copies (or decompresses) each chunk once.
#include "data/block_reader.hpp"

#include "data/h5_io.hpp"

namespace ringtrain::data {

BlockReader::BlockReader(std::shared_ptr<const Dataset> data)
    : data_(std::move(data)), files_(data_->spec().images_key) {
  for (const DatasetFile& f : data_->files()) {
    std::vector<std::int64_t> dims = {f.samples};
    for (const std::int64_t d : data_->sample_shape().dims()) dims.push_back(d);
    expected_.push_back({f.stamp, std::move(dims), data_->sample_type()});
  }
}

void BlockReader::read(const ReadBlock& block, std::byte* out) {
  const auto guard = h5::lock();
  const DatasetFile& df = data_->files()[static_cast<std::size_t>(block.file)];
  h5::ErrorContext where(fmt::format("{}: dataset '{}', samples {}-{}", df.path, data_->spec().images_key, block.row,
                                     block.row + block.rows - 1));
  const auto index = static_cast<std::size_t>(block.file);
  OpenFileCache::OpenFile& f = files_.open(index, df.path, expected_[index]);
  read_rows(f.dataset, f.mem_type, block.row, block.rows, block.rows, H5P_DEFAULT, 1, out);
}

}  // namespace ringtrain::data
