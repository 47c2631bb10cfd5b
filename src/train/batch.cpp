// BatchBuilder (see header).
#include "train/batch.hpp"

namespace ringtrain {

BatchBuilder::BatchBuilder(double mean, double std) {
  for (int v = 0; v < 256; ++v) lut_[static_cast<std::size_t>(v)] = static_cast<float>((v / 255.0 - mean) / std);
}

void BatchBuilder::fill(const InMemoryDataset& data, std::span<const std::int64_t> indices, Tensor& x,
                        std::int32_t* labels) const {
  const std::int64_t per = data.sample_numel();
  float* out = x.f32();
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::uint8_t* src = data.image(indices[i]);
    float* dst = out + static_cast<std::int64_t>(i) * per;
    for (std::int64_t j = 0; j < per; ++j) dst[j] = lut_[src[j]];
    labels[i] = data.label(indices[i]);
  }
}

void BatchBuilder::fill_range(const InMemoryDataset& data, std::int64_t begin, std::int64_t n, Tensor& x,
                              std::int32_t* labels) const {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) idx[static_cast<std::size_t>(i)] = begin + i;
  fill(data, idx, x, labels);
}

}  // namespace ringtrain
