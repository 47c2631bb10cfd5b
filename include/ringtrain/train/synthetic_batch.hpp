// Synthetic batches (bench train --synthetic, tune batch): inputs and labels shaped for a model,
// drawn from one seeded stream: uniform values in [-1, 1) for a model reading images, token ids
// below its number of classes for one reading tokens, and a label per output position.
#pragma once
#include <cstdint>
#include <vector>

#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

class Model;

struct SyntheticBatch {
  Tensor x;  // [n, ...input] on the host, in the model's input dtype (f32 or i32)
  std::vector<std::int32_t> labels;
};

SyntheticBatch make_synthetic_batch(const Model& model, std::int64_t n, std::uint64_t key);

}  // namespace ringtrain
