// BlockReader (see header). Blocks are whole HDF5 chunks (except at a rank's part boundaries),
// so each read maps to whole chunks and HDF5 copies (or decompresses) each chunk once.
#include "data/block_reader.hpp"

#include "data/h5_io.hpp"

namespace ringtrain::data {

BlockReader::BlockReader(std::shared_ptr<const Dataset> data)
    : data_(std::move(data)), files_(data_->spec().images_key) {}

void BlockReader::read(const ReadBlock& block, std::byte* out) {
  const auto guard = h5::lock();
  const DatasetFile& df = data_->files()[static_cast<std::size_t>(block.file)];
  h5::ErrorContext where(fmt::format("{}: dataset '{}', samples {}-{}", df.path, data_->spec().images_key, block.row,
                                     block.row + block.rows - 1));
  OpenFileCache::OpenFile& f = files_.open(static_cast<std::size_t>(block.file), df.path);
  read_rows(f.dataset, f.mem_type, block.row, block.rows, block.rows, H5P_DEFAULT, 1, out);
}

}  // namespace ringtrain::data
