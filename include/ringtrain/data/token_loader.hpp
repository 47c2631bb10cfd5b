// TokenLoader: batches of windows of an opened TokenDataset as int32 inputs and next-token
// targets, in (epoch, step) order. Training: the global batch at step i is slice i of a
// (seed, epoch) permutation of all windows (DistributedSampler), so it is the same set of
// windows on any number of ranks and with either read strategy; rank r gets the r-th
// contiguous 1/W of it. With prefetch > 0 a background thread prepares batches ahead.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "ringtrain/data/tokens.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

struct TokenLoaderOptions {
  // Training: shuffled windows, every rank the same number of full batches (the epoch's tail
  // that does not fill a global batch is dropped). Evaluation: this rank's even shard of the
  // windows in index order, the last batch partial.
  bool training = true;
  std::int64_t batch_size = 8;  // windows per rank
  int world_size = 1;
  int rank = 0;
  std::uint64_t seed = 0;
  std::int64_t epochs = 1;  // deliver epochs [start_epoch, epochs)
  // Where delivery starts (a resumed run): batch start_step of epoch start_epoch.
  std::int64_t start_epoch = 0;
  std::int64_t start_step = 0;
  int prefetch = 2;  // batches prepared ahead (0: on the caller's thread)
};

struct TokenBatch {
  std::int64_t epoch = 0;
  std::int64_t step = 0;
  Tensor inputs;                      // [n, block_size] int32: tokens [w*T, w*T + T) of window w
  Tensor targets;                     // [n, block_size] int32: tokens [w*T + 1, w*T + T + 1)
  std::vector<std::int64_t> windows;  // n window indices
  std::int64_t size() const { return static_cast<std::int64_t>(windows.size()); }
};

class TokenLoader {
 public:
  // DataError when the windows cannot fill one global batch (training) or an option is out of
  // range. Starts its thread; not collective.
  TokenLoader(std::shared_ptr<const TokenDataset> data, const TokenLoaderOptions& options);
  ~TokenLoader();  // stops and joins its thread
  TokenLoader(const TokenLoader&) = delete;
  TokenLoader& operator=(const TokenLoader&) = delete;

  std::int64_t steps_per_epoch() const;
  // The next batch; valid until the next call. Rethrows the loader thread's error (a token
  // outside the vocabulary, a failed read) at the batch it would have made.
  const TokenBatch& next();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringtrain
