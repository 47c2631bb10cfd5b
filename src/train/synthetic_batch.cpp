// make_synthetic_batch (see header).
#include "ringtrain/train/synthetic_batch.hpp"

#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/train/data_parallel_step.hpp"

namespace ringtrain {

SyntheticBatch make_synthetic_batch(const Model& model, std::int64_t n, std::uint64_t key) {
  const auto classes = static_cast<std::uint64_t>(model.output_shape().dims().back());
  const bool tokens = model.input_dtype() == DType::i32;
  SyntheticBatch b;
  b.x = Tensor::empty(model.input_shape().with_batch(n), tokens ? DType::i32 : DType::f32);
  b.labels.resize(static_cast<std::size_t>(n * label_positions(model)));
  Rng rng(key);
  for (std::int64_t i = 0; i < b.x.numel(); ++i) {
    if (tokens) {
      b.x.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng.below(classes));
    } else {
      b.x.f32()[i] = 2.0f * rng.uniform() - 1.0f;
    }
  }
  for (auto& label : b.labels) label = static_cast<std::int32_t>(rng.below(classes));
  return b;
}

}  // namespace ringtrain
