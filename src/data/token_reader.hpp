// Private: reads runs of a TokenDataset's token stream as int32, from the node's copy (memory
// strategy) or from the files (stream: POSIX driver, no MPI, so it runs on a loader thread;
// every read holds h5::lock() and checks its tokens against the vocabulary).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "data/open_file_cache.hpp"
#include "ringtrain/data/tokens.hpp"

namespace ringtrain::data {

class TokenReader {
 public:
  explicit TokenReader(std::shared_ptr<const TokenDataset> data);
  // Tokens [begin, begin + count) of the stream (which may span files) into out. DataError
  // naming the file and the token's index in it for a token >= vocab_size.
  void read(std::int64_t begin, std::int64_t count, std::int32_t* out);

 private:
  std::shared_ptr<const TokenDataset> data_;
  OpenFileCache files_;                            // stream: tokens datasets
  std::vector<OpenFileCache::Expected> expected_;  // stream: per file, as the dataset was opened
  std::vector<std::byte> scratch_;                 // stream: tokens as stored, before widening
};

}  // namespace ringtrain::data
