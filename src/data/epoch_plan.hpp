// Private: what one rank reads and in which order during an epoch. memory: the global batches
// are slices of a (seed, epoch) permutation of all usable samples (DistributedSampler), exactly
// as on any world size. stream: the dataset is cut into blocks (HDF5 chunks); a (seed, epoch)
// permutation of the blocks, concatenated, is the epoch's sample sequence S (world-size
// independent); rank r takes the r-th contiguous 1/W of S, groups consecutive blocks into
// windows of >= shuffle_window samples and shuffles within each window. Evaluation: the rank's
// even shard of the usable samples, in index order, the last batch partial.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ringtrain/data/dataset.hpp"

namespace ringtrain::data {

// Purpose indices of the stream strategy's RNG streams (block order per epoch, window
// shuffles keyed by epoch and the window's first position in S).
inline constexpr std::uint64_t kStreamBlockStream = 0x626c6f636b73;   // "blocks"
inline constexpr std::uint64_t kStreamWindowStream = 0x77696e646f77;  // "window"

// Samples per block of a dataset stored contiguously (not chunked): about 1 MiB of samples.
inline constexpr std::int64_t kContiguousBlockBytes = std::int64_t{1} << 20;

// Rows [row, row + rows) of one file, read in one call; `first` is the global index of `row`.
struct ReadBlock {
  std::int32_t file = 0;
  std::int64_t row = 0;
  std::int64_t rows = 0;
  std::int64_t first = 0;
};

// Blocks read together; their samples are order[previous group's end, end).
struct ReadGroup {
  std::vector<ReadBlock> blocks;
  std::int64_t end = 0;
};

struct EpochPlan {
  std::vector<std::int64_t> order;  // this rank's samples, batch after batch
  std::int64_t steps = 0;
  std::vector<ReadGroup> groups;  // stream only
};

struct PlanOptions {
  bool training = true;
  std::int64_t batch = 1;  // per rank
  int world_size = 1;
  int rank = 0;
  std::uint64_t seed = 0;
  std::int64_t shuffle_window = 1;  // stream
};

class EpochPlanner {
 public:
  // DataError (training) when the usable samples do not fill one global batch.
  EpochPlanner(std::shared_ptr<const Dataset> data, const PlanOptions& options);

  // Training: the same on every rank and every epoch. Evaluation: this rank's.
  std::int64_t steps_per_epoch() const { return steps_; }
  // Computed once per epoch and shared (the stream reader and the batch builder both ask).
  std::shared_ptr<const EpochPlan> plan(std::int64_t epoch) const;

 private:
  struct Block {
    ReadBlock read;
    std::int64_t usable_begin = 0;  // index in usable_ids_ of its first usable sample
    std::int64_t usable = 0;
  };
  EpochPlan make_plan(std::int64_t epoch) const;
  void memory_plan(std::int64_t epoch, EpochPlan& plan) const;
  void stream_plan(std::int64_t epoch, EpochPlan& plan) const;
  std::int64_t usable_id(std::int64_t k) const {
    return usable_ids_.empty() ? k : usable_ids_[static_cast<std::size_t>(k)];
  }

  std::shared_ptr<const Dataset> data_;
  PlanOptions o_;
  std::int64_t usable_ = 0;
  std::vector<std::int64_t> usable_ids_;  // empty when none is excluded (then k -> k)
  std::vector<Block> blocks_;             // stream only
  std::int64_t steps_ = 0;
  mutable std::mutex mutex_;
  mutable std::shared_ptr<const EpochPlan> last_;
  mutable std::int64_t last_epoch_ = -1;
};

}  // namespace ringtrain::data
