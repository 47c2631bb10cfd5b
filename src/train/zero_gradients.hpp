// ZeRO stage 2's gradient memory: no full gradient arena. Backward writes each bucket's
// gradients into a staging buffer: kRotatingBuffers buffers of the largest bucket taken in turn
// (a bucket waits until the one before it in that buffer is reduced), and a buffer of its own
// for each bucket holding a tied parameter, which backward writes first and completes last. Once
// a bucket is reduce-scattered, this rank's shard of it is copied into the shard gradients:
// every owned element, packed in arena order (the layout of its optimizer's state).
#pragma once
#include <cstdint>
#include <vector>

#include "ringtrain/comm/grad_bucketer.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

class ZeroGradients {
 public:
  static constexpr int kRotatingBuffers = 2;

  // buckets: in launch order; tied: the arena ranges of tied parameters (Model::tied_ranges).
  ZeroGradients(const std::vector<Bucket>& buckets, const std::vector<ArenaRange>& tied, int world, int rank);

  // Where the model's gradients go (Model::place_gradients) and how the bucketer stages them.
  std::vector<Model::GradientPlace> places() const;
  BucketStaging staging();
  // This rank's shard of the reduced gradients, packed; complete after GradBucketer::finish.
  const Tensor& shard() const { return shard_; }
  std::int64_t bytes() const;  // the staging buffers and the shard

 private:
  std::vector<Bucket> buckets_;
  std::vector<Tensor> buffers_;       // rotating ones first, then one per tied bucket
  std::vector<std::size_t> buffer_;   // per bucket: its buffer
  std::vector<int> reuses_;           // per bucket: the earlier bucket of the same buffer, or -1
  std::vector<ArenaRange> own_;       // per bucket: this rank's shard within the bucket
  std::vector<std::int64_t> packed_;  // per bucket: where its shard starts in shard_
  Tensor shard_;
};

}  // namespace ringtrain
