// DistributedSampler: the global batch at step i of an epoch is slice [i*G, (i+1)*G) of a
// permutation of all samples seeded by (seed, epoch), whatever the world size; rank r takes
// the r-th contiguous 1/world of it. The epoch's tail that does not fill a global batch is
// dropped, so every rank runs the same number of steps.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace ringtrain {

// Purpose index of the sampler's RNG stream: epoch e shuffles with
// Rng(stream_key(seed, kSamplerStream, e)). Part of the on-disk determinism contract.
inline constexpr std::uint64_t kSamplerStream = 0x73616d706c6572;  // "sampler"

class DistributedSampler {
 public:
  // Throws DataError when global_batch is not a multiple of world_size, or when there are
  // fewer samples than one global batch.
  DistributedSampler(std::int64_t num_samples, std::int64_t global_batch, int world_size, int rank, std::uint64_t seed);

  std::int64_t steps_per_epoch() const { return num_samples_ / global_batch_; }
  std::int64_t global_batch_size() const { return global_batch_; }
  std::int64_t rank_batch_size() const { return global_batch_ / world_size_; }

  void set_epoch(std::int64_t epoch);  // computes this epoch's permutation
  std::int64_t epoch() const { return epoch_; }
  std::span<const std::int64_t> global_batch(std::int64_t step) const;
  std::span<const std::int64_t> rank_batch(std::int64_t step) const;

 private:
  std::int64_t num_samples_;
  std::int64_t global_batch_;
  int world_size_;
  int rank_;
  std::uint64_t seed_;
  std::int64_t epoch_ = -1;
  std::vector<std::int64_t> permutation_;
};

// Contiguous split of n items over world ranks without dropping any (for evaluation):
// rank r gets [begin, end).
struct Shard {
  std::int64_t begin = 0;
  std::int64_t end = 0;
};
Shard even_shard(std::int64_t n, int world_size, int rank);

}  // namespace ringtrain
