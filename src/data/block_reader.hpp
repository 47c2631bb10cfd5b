// Private: reads ReadBlocks of a stream-strategy dataset with the POSIX driver (independent,
// no MPI: it runs on a loader thread), keeping a few files open. Every read holds h5::lock();
// a failure is a DataError naming the file, the dataset and the samples.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "data/epoch_plan.hpp"
#include "data/open_file_cache.hpp"

namespace ringtrain::data {

class BlockReader {
 public:
  explicit BlockReader(std::shared_ptr<const Dataset> data);
  // block.rows samples into out (sample_bytes() each).
  void read(const ReadBlock& block, std::byte* out);

 private:
  std::shared_ptr<const Dataset> data_;
  OpenFileCache files_;                            // images datasets
  std::vector<OpenFileCache::Expected> expected_;  // per file, as the dataset was opened
};

}  // namespace ringtrain::data
