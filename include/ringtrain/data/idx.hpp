// Reader for the IDX format (MNIST / Fashion-MNIST), plain or gzip-compressed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ringtrain {

struct IdxArray {
  std::vector<std::int64_t> dims;  // e.g. {60000, 28, 28}
  std::vector<std::uint8_t> data;  // row-major, unsigned bytes only (type code 0x08)
};

// Throws DataError naming the path on a missing, truncated or non-IDX file.
IdxArray read_idx(const std::string& path);

}  // namespace ringtrain
