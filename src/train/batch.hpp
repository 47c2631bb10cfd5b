// Private: assembles a float batch from an in-memory uint8 dataset through a 256-entry
// lookup table ((u8 / 255 - mean) / std), the same for training and evaluation.
#pragma once
#include <array>
#include <cstdint>
#include <span>

#include "ringtrain/data/dataset.hpp"

namespace ringtrain {

class BatchBuilder {
 public:
  BatchBuilder(double mean, double std);
  // x: [indices.size(), C, H, W] float; labels: indices.size() entries.
  void fill(const InMemoryDataset& data, std::span<const std::int64_t> indices, Tensor& x,
            std::int32_t* labels) const;
  // Contiguous range [begin, begin + n) of the dataset.
  void fill_range(const InMemoryDataset& data, std::int64_t begin, std::int64_t n, Tensor& x,
                  std::int32_t* labels) const;

 private:
  std::array<float, 256> lut_{};
};

}  // namespace ringtrain
