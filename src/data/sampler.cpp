// DistributedSampler and even_shard. The permutation depends only on (seed, epoch), never on
// world size or rank, so a run resumed on a different number of ranks sees the same batches.
#include "ringtrain/data/sampler.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/random.hpp"

namespace ringtrain {

DistributedSampler::DistributedSampler(std::int64_t num_samples, std::int64_t global_batch, int world_size, int rank,
                                       std::uint64_t seed)
    : num_samples_(num_samples), global_batch_(global_batch), world_size_(world_size), rank_(rank), seed_(seed) {
  RT_REQUIRE(world_size > 0 && rank >= 0 && rank < world_size, DataError,
             "sampler: rank {} is not in a world of size {}", rank, world_size);
  RT_REQUIRE(global_batch > 0, DataError, "sampler: global batch must be > 0, got {}", global_batch);
  RT_REQUIRE(global_batch % world_size == 0, DataError,
             "sampler: global batch {} is not a multiple of the world size {}", global_batch, world_size);
  RT_REQUIRE(num_samples >= global_batch, DataError,
             "sampler: {} samples is fewer than one global batch of {} (= world {} x batch {})", num_samples,
             global_batch, world_size, global_batch / world_size);
}

void DistributedSampler::set_epoch(std::int64_t epoch) {
  RT_REQUIRE(epoch >= 0, DataError, "sampler: epoch must be >= 0, got {}", epoch);
  if (epoch == epoch_) return;
  permutation_.resize(static_cast<std::size_t>(num_samples_));
  std::iota(permutation_.begin(), permutation_.end(), std::int64_t{0});
  Rng rng(stream_key(seed_, kSamplerStream, static_cast<std::uint64_t>(epoch)));
  for (std::size_t i = permutation_.size() - 1; i > 0; --i) {
    const auto j = static_cast<std::size_t>(rng.below(i + 1));
    std::swap(permutation_[i], permutation_[j]);
  }
  epoch_ = epoch;
}

std::span<const std::int64_t> DistributedSampler::global_batch(std::int64_t step) const {
  RT_REQUIRE(epoch_ >= 0, DataError, "sampler: set_epoch must be called before asking for batches");
  RT_REQUIRE(step >= 0 && step < steps_per_epoch(), DataError, "sampler: step {} is outside [0, {})", step,
             steps_per_epoch());
  return std::span<const std::int64_t>(permutation_)
      .subspan(static_cast<std::size_t>(step * global_batch_), static_cast<std::size_t>(global_batch_));
}

std::span<const std::int64_t> DistributedSampler::rank_batch(std::int64_t step) const {
  const std::int64_t per_rank = rank_batch_size();
  return global_batch(step).subspan(static_cast<std::size_t>(rank_ * per_rank), static_cast<std::size_t>(per_rank));
}

Shard even_shard(std::int64_t n, int world_size, int rank) {
  RT_REQUIRE(n >= 0, DataError, "even_shard: n must be >= 0, got {}", n);
  RT_REQUIRE(world_size > 0 && rank >= 0 && rank < world_size, DataError,
             "even_shard: rank {} is not in a world of size {}", rank, world_size);
  const std::int64_t base = n / world_size;
  const std::int64_t extra = n % world_size;
  Shard shard;
  shard.begin = rank * base + std::min<std::int64_t>(rank, extra);
  shard.end = shard.begin + base + (rank < extra ? 1 : 0);
  return shard;
}

}  // namespace ringtrain
