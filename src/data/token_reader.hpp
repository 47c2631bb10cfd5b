// Private: reads runs of a TokenDataset's token stream as int32, from the node's copy (memory
// strategy) or from the files (stream: POSIX driver, no MPI, so it runs on a loader thread;
// every read holds h5::lock() and checks its tokens against the vocabulary).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "hdf5/h5_handle.hpp"
#include "ringtrain/data/tokens.hpp"

namespace ringtrain::data {

class TokenReader {
 public:
  explicit TokenReader(std::shared_ptr<const TokenDataset> data);
  ~TokenReader();
  TokenReader(const TokenReader&) = delete;
  TokenReader& operator=(const TokenReader&) = delete;

  // Tokens [begin, begin + count) of the stream (which may span files) into out. DataError
  // naming the file and the token's index in it for a token >= vocab_size.
  void read(std::int64_t begin, std::int64_t count, std::int32_t* out);

 private:
  struct OpenFile {
    std::size_t index = 0;
    h5::File file;
    h5::Dataset tokens;
    h5::Datatype mem_type;
    std::int64_t last_use = 0;
  };
  OpenFile& open(std::size_t index);

  std::shared_ptr<const TokenDataset> data_;
  std::vector<OpenFile> open_;  // stream: a few files, least recently used replaced first
  std::int64_t uses_ = 0;
  std::vector<std::byte> scratch_;  // stream: tokens as stored, before widening
};

}  // namespace ringtrain::data
