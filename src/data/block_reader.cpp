// BlockReader (see header). Blocks are whole HDF5 chunks (except at a rank's part boundaries),
// so each read maps to whole chunks and HDF5 copies (or decompresses) each chunk once.
#include "data/block_reader.hpp"

#include <algorithm>

#include "data/h5_io.hpp"

namespace ringtrain::data {
namespace {
// Enough for the few files a shuffle window touches at once; well under descriptor limits.
constexpr std::size_t kOpenFiles = 16;
}  // namespace

BlockReader::BlockReader(std::shared_ptr<const Dataset> data) : data_(std::move(data)) {}

BlockReader::~BlockReader() {
  const auto guard = h5::lock();
  open_.clear();
}

BlockReader::OpenFile& BlockReader::open(std::int32_t index) {
  ++uses_;
  for (auto& f : open_)
    if (f.index == index) {
      f.last_use = uses_;
      return f;
    }
  if (open_.size() == kOpenFiles)
    open_.erase(std::min_element(open_.begin(), open_.end(),
                                 [](const OpenFile& a, const OpenFile& b) { return a.last_use < b.last_use; }));
  const DatasetFile& df = data_->files()[static_cast<std::size_t>(index)];
  OpenFile f;
  f.index = index;
  f.last_use = uses_;
  h5::PropList fapl(RT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  RT_H5_CHECK(H5Pset_fapl_sec2(fapl));
  f.file = h5::File(RT_H5_CHECK(H5Fopen(df.path.c_str(), H5F_ACC_RDONLY, fapl)));
  f.images = open_dataset(f.file, df.path, data_->spec().images_key);
  f.mem_type = native_type_of(f.images);
  open_.push_back(std::move(f));
  return open_.back();
}

void BlockReader::read(const ReadBlock& block, std::byte* out) {
  const auto guard = h5::lock();
  const DatasetFile& df = data_->files()[static_cast<std::size_t>(block.file)];
  h5::ErrorContext where(fmt::format("{}: dataset '{}', samples {}-{}", df.path, data_->spec().images_key, block.row,
                                     block.row + block.rows - 1));
  OpenFile& f = open(block.file);
  read_rows(f.images, f.mem_type, block.row, block.rows, block.rows, H5P_DEFAULT, 1, out);
}

}  // namespace ringtrain::data
