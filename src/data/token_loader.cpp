// TokenLoader (see header). As the image Loader, batches are made ahead in reusable slots by a
// BatchPrefetcher; a batch is one read per window (TokenReader).
#include "ringtrain/data/token_loader.hpp"

#include <optional>

#include "data/batch_prefetcher.hpp"
#include "data/token_reader.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/data/sampler.hpp"

namespace ringtrain {

struct TokenLoader::Impl {
  Impl(std::shared_ptr<const TokenDataset> d, const TokenLoaderOptions& options)
      : data(std::move(d)), o(options), reader(data), prefetcher(o.prefetch) {
    RT_REQUIRE(o.batch_size > 0, DataError, "loader: batch size must be > 0, got {}", o.batch_size);
    RT_REQUIRE(o.prefetch >= 0, DataError, "data.prefetch: must be >= 0, got {}", o.prefetch);
    RT_REQUIRE(o.epochs > 0, DataError, "loader: epochs must be > 0, got {}", o.epochs);
    const std::int64_t windows = data->windows();
    if (o.training) {
      RT_REQUIRE(windows >= o.batch_size * o.world_size, DataError,
                 "{}: {} windows of block_size + 1 = {} tokens are fewer than one global batch of {} (= world {} x "
                 "batch {})",
                 data->files().front().path, windows, data->block_size() + 1, o.batch_size * o.world_size, o.world_size,
                 o.batch_size);
      sampler.emplace(windows, o.batch_size * o.world_size, o.world_size, o.rank, o.seed);
      steps = sampler->steps_per_epoch();
    } else {
      shard = even_shard(windows, o.world_size, o.rank);
      steps = (shard.end - shard.begin + o.batch_size - 1) / o.batch_size;
    }
    RT_REQUIRE(o.start_epoch >= 0 && o.start_step >= 0 && (o.start_step == 0 || o.start_step < steps), DataError,
               "loader: start position epoch {} step {} is outside an epoch of {} steps", o.start_epoch, o.start_step,
               steps);
    const std::int64_t t = data->block_size();
    slots.resize(prefetcher.slots());
    for (auto& s : slots) {
      s.window_tokens = std::vector<std::int32_t>(static_cast<std::size_t>(t + 1));
      s.inputs_full = Tensor::empty(Shape{o.batch_size, t}, DType::i32);
      s.targets_full = Tensor::empty(Shape{o.batch_size, t}, DType::i32);
      s.batch.windows.reserve(static_cast<std::size_t>(o.batch_size));
    }
    prefetcher.start([this](std::size_t k) { return fill(k); });
  }

  // Makes the next batch in slot k; false past the last epoch.
  bool fill(std::size_t k) {
    while (step == steps) {  // (an evaluation shard may have no batch at all)
      ++epoch;
      step = 0;
      if (epoch >= o.epochs) return false;
    }
    if (epoch >= o.epochs) return false;
    Slot& s = slots[k];
    TokenBatch& b = s.batch;
    b.epoch = epoch;
    b.step = step;
    b.windows.clear();
    if (sampler) {
      sampler->set_epoch(epoch);
      const auto mine = sampler->rank_batch(step);
      b.windows.assign(mine.begin(), mine.end());
    } else {
      const std::int64_t first = shard.begin + step * o.batch_size;
      for (std::int64_t w = first; w < std::min(first + o.batch_size, shard.end); ++w) b.windows.push_back(w);
    }
    const auto n = b.size();
    const std::int64_t t = data->block_size();
    b.inputs = s.inputs_full.rows(0, n);
    b.targets = s.targets_full.rows(0, n);
    std::int32_t* tokens = s.window_tokens.data();
    for (std::int64_t i = 0; i < n; ++i) {
      reader.read(b.windows[static_cast<std::size_t>(i)] * t, t + 1, tokens);
      std::copy(tokens, tokens + t, b.inputs.data<std::int32_t>() + i * t);
      std::copy(tokens + 1, tokens + t + 1, b.targets.data<std::int32_t>() + i * t);
    }
    ++step;
    return true;
  }

  struct Slot {
    TokenBatch batch;
    Tensor inputs_full, targets_full;  // batch_size rows; the batch's tensors view the first n
    std::vector<std::int32_t> window_tokens;
  };

  std::shared_ptr<const TokenDataset> data;
  TokenLoaderOptions o;
  data::TokenReader reader;                   // used by the builder thread only (or the caller's, prefetch 0)
  std::optional<DistributedSampler> sampler;  // training
  Shard shard;                                // evaluation: this rank's windows
  std::int64_t steps = 0;
  std::vector<Slot> slots;
  // The builder's position: the next batch is (epoch, step).
  std::int64_t epoch = o.start_epoch;
  std::int64_t step = o.start_step;
  data::BatchPrefetcher prefetcher;  // last: its builder uses all of the above
};

TokenLoader::TokenLoader(std::shared_ptr<const TokenDataset> data, const TokenLoaderOptions& options)
    : impl_(std::make_unique<Impl>(std::move(data), options)) {}

TokenLoader::~TokenLoader() = default;

std::int64_t TokenLoader::steps_per_epoch() const { return impl_->steps; }

const TokenBatch& TokenLoader::next() {
  const std::optional<std::size_t> slot = impl_->prefetcher.next();
  RT_REQUIRE(slot.has_value(), DataError, "loader: no batch left: all {} epochs were delivered", impl_->o.epochs);
  return impl_->slots[*slot].batch;
}

}  // namespace ringtrain
