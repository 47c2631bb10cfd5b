// ZeRO stage 2's gradient memory: no full gradient arena. Backward writes each bucket's
// gradients into a staging ring the size of the largest bucket, the buckets placed one after the
// other in launch order and wrapping to the ring's start where the next does not fit; a bucket
// waits until the latest earlier bucket it overlaps in the ring is reduced (every gradient is
// written in its bucket's turn: a tied token table's in row blocks, Model::gradient_cuts). Once a
// bucket is reduce-scattered, this rank's shard of it is copied into the shard gradients: every owned
// element, packed in arena order (the layout of its optimizer's state). On a GPU the ring and the
// shard are device memory and the copy runs on the compute stream.
#pragma once
#include <cstdint>
#include <vector>

#include "ringtrain/comm/grad_bucketer.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

class ZeroGradients {
 public:
  // buckets: in launch order; pads: the arena ranges holding no parameter (ParamLayout::pads),
  // which backward leaves as the ring's previous bucket had them: zeroed before a bucket is read.
  // device: where the model's gradients are (the ring and the shard live there too).
  ZeroGradients(const std::vector<Bucket>& buckets, std::vector<ArenaRange> pads, int world, int rank,
                Device device = Device::cpu);

  // Where the model's gradients go (Model::place_gradients) and how the bucketer stages them.
  std::vector<Model::GradientPlace> places() const;
  BucketStaging staging();
  // This rank's shard of the reduced gradients, packed; complete after GradBucketer::finish.
  const Tensor& shard() const { return shard_; }
  std::int64_t shard_bytes() const;    // the reduced shard, kept for the whole step
  std::int64_t staging_bytes() const;  // the staging ring, a communication buffer reused bucket by bucket

 private:
  std::vector<Bucket> buckets_;
  std::vector<ArenaRange> pads_;
  Tensor ring_;
  std::vector<std::int64_t> at_;      // per bucket: where it starts in the ring
  std::vector<int> reuses_;           // per bucket: the latest earlier bucket it overlaps, or -1
  std::vector<ArenaRange> own_;       // per bucket: this rank's shard within the bucket
  std::vector<std::int64_t> packed_;  // per bucket: where its shard starts in shard_
  Tensor shard_;
};

}  // namespace ringtrain
