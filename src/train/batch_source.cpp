// The two BatchSources: the image Loader's batches as they are, the TokenLoader's windows as
// inputs and targets.
#include "ringtrain/train/batch_source.hpp"

namespace ringtrain {
namespace {

class ImageSource final : public BatchSource {
 public:
  ImageSource(std::shared_ptr<const Dataset> data, const LoaderOptions& options) : loader_(std::move(data), options) {}
  std::int64_t steps_per_epoch() const override { return loader_.steps_per_epoch(); }
  SourceBatch next() override {
    const Batch& b = loader_.next();
    return SourceBatch{&b, b.x, b.labels.data(), b.size()};
  }

 private:
  Loader loader_;
};

class TokenSource final : public BatchSource {
 public:
  TokenSource(std::shared_ptr<const TokenDataset> data, const TokenLoaderOptions& options)
      : loader_(std::move(data), options) {}
  std::int64_t steps_per_epoch() const override { return loader_.steps_per_epoch(); }
  SourceBatch next() override {
    const TokenBatch& b = loader_.next();
    return SourceBatch{nullptr, b.inputs, b.targets.data<std::int32_t>(), b.size()};
  }

 private:
  TokenLoader loader_;
};

}  // namespace

std::unique_ptr<BatchSource> make_batch_source(std::shared_ptr<const Dataset> data, const LoaderOptions& options) {
  return std::make_unique<ImageSource>(std::move(data), options);
}

std::unique_ptr<BatchSource> make_batch_source(std::shared_ptr<const TokenDataset> data,
                                               const TokenLoaderOptions& options) {
  return std::make_unique<TokenSource>(std::move(data), options);
}

}  // namespace ringtrain
