// BatchSource: the trainer's view of its data whatever it holds: image batches from a
// Loader or token windows from a TokenLoader, each step as the model's input and one label per
// output position (one per image; block_size next-token targets per window).
#pragma once
#include <cstdint>
#include <memory>

#include "ringtrain/data/loader.hpp"
#include "ringtrain/data/token_loader.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

struct SourceBatch {
  const Batch* images = nullptr;  // an image batch (possibly raw, for GPU augmentation); else:
  Tensor x;                       // token ids [n, block_size]
  const std::int32_t* labels = nullptr;
  std::int64_t size = 0;  // samples (windows)
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual std::int64_t steps_per_epoch() const = 0;
  // The next batch, valid until the next call; rethrows the loader's errors.
  virtual SourceBatch next() = 0;
};

std::unique_ptr<BatchSource> make_batch_source(std::shared_ptr<const Dataset> data, const LoaderOptions& options);
std::unique_ptr<BatchSource> make_batch_source(std::shared_ptr<const TokenDataset> data,
                                               const TokenLoaderOptions& options);

}  // namespace ringtrain
