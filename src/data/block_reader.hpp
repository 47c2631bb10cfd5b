// Private: reads ReadBlocks of a stream-strategy dataset with the POSIX driver (independent,
// no MPI: it runs on a loader thread), keeping a few files open. Every read holds h5::lock();
// a failure is a DataError naming the file, the dataset and the samples.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "data/epoch_plan.hpp"
#include "hdf5/h5_handle.hpp"

namespace ringtrain::data {

class BlockReader {
 public:
  explicit BlockReader(std::shared_ptr<const Dataset> data);
  ~BlockReader();
  BlockReader(const BlockReader&) = delete;
  BlockReader& operator=(const BlockReader&) = delete;

  // block.rows samples into out (sample_bytes() each).
  void read(const ReadBlock& block, std::byte* out);

 private:
  struct OpenFile {
    std::int32_t index = -1;
    h5::File file;
    h5::Dataset images;
    h5::Datatype mem_type;
    std::int64_t last_use = 0;
  };
  OpenFile& open(std::int32_t index);

  std::shared_ptr<const Dataset> data_;
  std::vector<OpenFile> open_;  // at most kOpenFiles, least recently used replaced first
  std::int64_t uses_ = 0;
};

}  // namespace ringtrain::data
