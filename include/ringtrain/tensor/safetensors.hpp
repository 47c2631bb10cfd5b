// safetensors files (HuggingFace's format for named tensors): an 8-byte little-endian header
// length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {string: string}}, then the tensors' bytes (little-endian, offsets relative to
// the end of the header, together covering the data exactly). Files are untrusted: the reader
// checks the whole header against the file's size before it reads any tensor.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

// A tensor to write: numel(shape) floats, stored as F32.
struct SafetensorsTensor {
  std::string name;
  Shape shape;
  const float* data = nullptr;
};

// Writes the tensors in the order given (the header padded with spaces so the data starts
// 8-byte aligned), atomically (path.tmp, fsync, rename). IoError naming the path.
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);

class SafetensorsFile {
 public:
  struct Entry {
    std::string name;
    std::string dtype;  // as the file spells it: "F32", "BF16", "I64", ...
    Shape shape;
    std::int64_t begin = 0, end = 0;  // byte range in the data section
  };

  // Reads and checks the header: DataError naming the file (and the tensor) for a file shorter
  // than its header, a header that is not a JSON object, an unknown dtype, a shape that does
  // not match its data_offsets, offsets outside the data, overlapping or leaving bytes unused.
  explicit SafetensorsFile(std::string path);

  const std::string& path() const { return path_; }
  const std::vector<Entry>& tensors() const { return tensors_; }  // in data order
  const Entry* find(std::string_view name) const;                 // null when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor's elements as floats: F32 as stored, F16 and BF16 converted (exactly);
  // DataError naming the tensor for any other dtype or a read failure.
  std::vector<float> read_f32(const Entry& e) const;

 private:
  std::string path_;
  std::int64_t data_start_ = 0;  // file offset of the data section: 8 + N
  std::vector<Entry> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace ringtrain
