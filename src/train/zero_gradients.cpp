// ZeroGradients (see header).
#include "train/zero_gradients.hpp"

#include <algorithm>

#include "ringtrain/comm/shard.hpp"

namespace ringtrain {

ZeroGradients::ZeroGradients(const std::vector<Bucket>& buckets, std::vector<ArenaRange> pads, int world, int rank,
                             Device device)
    : buckets_(buckets),
      pads_(std::move(pads)),
      at_(buckets.size()),
      reuses_(buckets.size(), -1),
      own_(buckets.size()) {
  std::int64_t size = 0;
  for (const Bucket& b : buckets_) size = std::max(size, b.end - b.begin);
  std::int64_t cursor = 0;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    const std::int64_t n = buckets_[i].end - buckets_[i].begin;
    own_[i] = shard_range(n, world, rank);
    if (cursor + n > size) cursor = 0;
    at_[i] = cursor;
    for (std::size_t j = i; j-- > 0;)
      if (at_[j] < cursor + n && cursor < at_[j] + (buckets_[j].end - buckets_[j].begin)) {
        reuses_[i] = static_cast<int>(j);
        break;
      }
    cursor += n;
  }
  ring_ = Tensor::empty(Shape{size}, DType::f32, device);
  // The shard in arena order: buckets run from the end of the arena, so their shards are packed
  // from the last bucket launched to the first.
  std::int64_t packed = 0;
  packed_.resize(buckets_.size());
  for (std::size_t i = buckets_.size(); i-- > 0;) {
    packed_[i] = packed;
    packed += own_[i].count;
  }
  shard_ = Tensor::empty(Shape{packed}, DType::f32, device);
}

std::vector<Model::GradientPlace> ZeroGradients::places() const {
  std::vector<Model::GradientPlace> out;
  for (std::size_t i = buckets_.size(); i-- > 0;)
    out.push_back({buckets_[i].begin, buckets_[i].end - buckets_[i].begin, ring_.f32() + at_[i]});
  return out;
}

BucketStaging ZeroGradients::staging() {
  BucketStaging s;
  for (std::size_t i = 0; i < buckets_.size(); ++i) s.data.push_back(ring_.f32() + at_[i]);
  s.reuses = reuses_;
  for (const Bucket& b : buckets_) {
    std::vector<ArenaRange>& unwritten = s.unwritten.emplace_back();
    for_each_owned(pads_, {{b.begin, b.end - b.begin}}, [&](std::int64_t, std::int64_t from, std::int64_t count) {
      unwritten.push_back({from, count});
    });
  }
  s.on_reduced = [this](std::size_t i) {
    copy_into(shard_.rows(packed_[i], own_[i].count), ring_.rows(at_[i] + own_[i].offset, own_[i].count));
  };
  return s;
}

std::int64_t ZeroGradients::shard_bytes() const { return static_cast<std::int64_t>(allocated_bytes(shard_)); }

std::int64_t ZeroGradients::staging_bytes() const { return static_cast<std::int64_t>(allocated_bytes(ring_)); }

}  // namespace ringtrain
