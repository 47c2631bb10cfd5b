// EpochPlanner (see header). Both strategies work on "usable" positions 0..M-1 (samples not
// excluded for NaN/Inf, in index order) and map them to global sample indices at the end, so
// leaving samples out never changes how the others are ordered relative to each other.
#include "data/epoch_plan.hpp"

#include <algorithm>
#include <numeric>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/data/sampler.hpp"

namespace ringtrain::data {
namespace {

template <typename T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<std::size_t>(rng.below(i))]);
}

}  // namespace

EpochPlanner::EpochPlanner(std::shared_ptr<const Dataset> data, const PlanOptions& options)
    : data_(std::move(data)), o_(options) {
  RT_REQUIRE(o_.batch > 0, DataError, "loader: batch size must be > 0, got {}", o_.batch);
  RT_REQUIRE(o_.shuffle_window > 0, DataError, "data.shuffle_window: must be > 0, got {}", o_.shuffle_window);
  const auto& excluded = data_->excluded();
  usable_ = data_->usable_size();
  if (!excluded.empty()) {
    for (std::int64_t i = 0, e = 0; i < data_->size(); ++i) {
      if (e < static_cast<std::int64_t>(excluded.size()) && excluded[static_cast<std::size_t>(e)] == i) {
        ++e;
        continue;
      }
      usable_ids_.push_back(i);
    }
  }
  if (data_->spec().strategy == ReadStrategy::stream) {
    std::int64_t usable_before = 0;
    auto ex = excluded.begin();
    for (std::size_t f = 0; f < data_->files().size(); ++f) {
      const DatasetFile& file = data_->files()[f];
      const std::int64_t per_block = file.chunk_rows > 0
                                         ? file.chunk_rows
                                         : std::max<std::int64_t>(1, kContiguousBlockBytes / data_->sample_bytes());
      for (std::int64_t row = 0; row < file.samples; row += per_block) {
        Block b;
        b.read =
            ReadBlock{static_cast<std::int32_t>(f), row, std::min(per_block, file.samples - row), file.first + row};
        std::int64_t left_out = 0;
        for (; ex != excluded.end() && *ex < b.read.first + b.read.rows; ++ex) ++left_out;
        b.usable_begin = usable_before;
        b.usable = b.read.rows - left_out;
        usable_before += b.usable;
        blocks_.push_back(b);
      }
    }
  }
  const std::int64_t world = o_.world_size;
  if (!o_.training) {
    const Shard shard = even_shard(usable_, o_.world_size, o_.rank);
    steps_ = (shard.end - shard.begin + o_.batch - 1) / o_.batch;
  } else if (data_->spec().strategy == ReadStrategy::memory) {
    steps_ = DistributedSampler(usable_, o_.batch * world, o_.world_size, o_.rank, o_.seed).steps_per_epoch();
  } else {
    steps_ = usable_ / world / o_.batch;
    RT_REQUIRE(steps_ > 0, DataError,
               "sampler: {} samples is fewer than one global batch of {} (= world {} x batch {})", usable_,
               o_.batch * world, world, o_.batch);
  }
}

std::shared_ptr<const EpochPlan> EpochPlanner::plan(std::int64_t epoch) const {
  {
    const std::lock_guard<std::mutex> guard(mutex_);
    if (epoch == last_epoch_) return last_;
  }
  auto made = std::make_shared<const EpochPlan>(make_plan(epoch));
  const std::lock_guard<std::mutex> guard(mutex_);
  last_ = made;
  last_epoch_ = epoch;
  return made;
}

EpochPlan EpochPlanner::make_plan(std::int64_t epoch) const {
  RT_REQUIRE(epoch >= 0, DataError, "loader: epoch must be >= 0, got {}", epoch);
  EpochPlan plan;
  plan.steps = steps_;
  if (data_->spec().strategy == ReadStrategy::memory) {
    memory_plan(epoch, plan);
  } else {
    stream_plan(epoch, plan);
  }
  return plan;
}

void EpochPlanner::memory_plan(std::int64_t epoch, EpochPlan& plan) const {
  if (!o_.training) {
    const Shard shard = even_shard(usable_, o_.world_size, o_.rank);
    for (std::int64_t k = shard.begin; k < shard.end; ++k) plan.order.push_back(usable_id(k));
    return;
  }
  DistributedSampler sampler(usable_, o_.batch * o_.world_size, o_.world_size, o_.rank, o_.seed);
  sampler.set_epoch(epoch);
  plan.order.reserve(static_cast<std::size_t>(steps_ * o_.batch));
  for (std::int64_t s = 0; s < steps_; ++s)
    for (const std::int64_t k : sampler.rank_batch(s)) plan.order.push_back(usable_id(k));
}

void EpochPlanner::stream_plan(std::int64_t epoch, EpochPlan& plan) const {
  std::vector<std::size_t> block_order(blocks_.size());
  std::iota(block_order.begin(), block_order.end(), std::size_t{0});
  Shard part;
  if (o_.training) {
    Rng rng(stream_key(o_.seed, kStreamBlockStream, static_cast<std::uint64_t>(epoch)));
    shuffle(block_order, rng);
    const std::int64_t per_rank = usable_ / o_.world_size;
    part = Shard{o_.rank * per_rank, o_.rank * per_rank + steps_ * o_.batch};
  } else {
    part = even_shard(usable_, o_.world_size, o_.rank);
  }

  ReadGroup group;
  std::vector<std::int64_t> samples;
  std::int64_t group_first = 0;  // the window's first position in S: its shuffle's key
  auto close_group = [&] {
    if (o_.training) {
      Rng rng(stream_key(o_.seed, kStreamWindowStream, static_cast<std::uint64_t>(epoch),
                         static_cast<std::uint64_t>(group_first)));
      shuffle(samples, rng);
    }
    plan.order.insert(plan.order.end(), samples.begin(), samples.end());
    group.end = static_cast<std::int64_t>(plan.order.size());
    plan.groups.push_back(std::move(group));
    group = ReadGroup{};
    samples.clear();
  };
  std::int64_t pos = 0;  // position in S of the current block's first usable sample
  for (const std::size_t k : block_order) {
    if (pos >= part.end) break;
    const Block& b = blocks_[k];
    const std::int64_t lo = std::max(pos, part.begin);
    const std::int64_t hi = std::min(pos + b.usable, part.end);
    if (lo < hi) {
      if (samples.empty()) group_first = lo;
      const std::int64_t first = usable_id(b.usable_begin + lo - pos);
      const std::int64_t last = usable_id(b.usable_begin + hi - pos - 1);
      group.blocks.push_back(ReadBlock{b.read.file, b.read.row + (first - b.read.first), last - first + 1, first});
      for (std::int64_t q = lo; q < hi; ++q) samples.push_back(usable_id(b.usable_begin + q - pos));
      if (static_cast<std::int64_t>(samples.size()) >= o_.shuffle_window) close_group();
    }
    pos += b.usable;
  }
  if (!samples.empty()) close_group();
}

}  // namespace ringtrain::data
