// ZeroGradients (see header).
#include "train/zero_gradients.hpp"

#include <algorithm>
#include <cstring>

#include "ringtrain/comm/shard.hpp"

namespace ringtrain {
namespace {

bool overlaps(const Bucket& b, const std::vector<ArenaRange>& ranges) {
  return std::any_of(ranges.begin(), ranges.end(),
                     [&](const ArenaRange& r) { return r.offset < b.end && b.begin < r.end(); });
}

}  // namespace

ZeroGradients::ZeroGradients(const std::vector<Bucket>& buckets, const std::vector<ArenaRange>& tied, int world,
                             int rank)
    : buckets_(buckets), buffer_(buckets.size()), reuses_(buckets.size(), -1), own_(buckets.size()) {
  std::int64_t largest = 0;
  for (const Bucket& b : buckets_)
    if (!overlaps(b, tied)) largest = std::max(largest, b.end - b.begin);
  for (int i = 0; i < kRotatingBuffers && largest > 0; ++i) buffers_.push_back(Tensor::empty(Shape{largest}));
  std::vector<int> last_user(buffers_.size(), -1);
  std::size_t turn = 0;  // rotating buffers, taken in turn by the buckets without a tied parameter
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = buckets_[i];
    if (overlaps(b, tied)) {
      buffer_[i] = buffers_.size();
      buffers_.push_back(Tensor::empty(Shape{b.end - b.begin}));
    } else {
      buffer_[i] = turn++ % static_cast<std::size_t>(kRotatingBuffers);
      reuses_[i] = last_user[buffer_[i]];
      last_user[buffer_[i]] = static_cast<int>(i);
    }
    const ArenaRange s = shard_range(b.end - b.begin, world, rank);
    own_[i] = s;
  }
  // The shard in arena order: buckets run from the end of the arena, so their shards are packed
  // from the last bucket launched to the first.
  std::int64_t at = 0;
  packed_.resize(buckets_.size());
  for (std::size_t i = buckets_.size(); i-- > 0;) {
    packed_[i] = at;
    at += own_[i].count;
  }
  shard_ = Tensor::empty(Shape{at});
}

std::vector<Model::GradientPlace> ZeroGradients::places() const {
  std::vector<Model::GradientPlace> out;
  for (std::size_t i = buckets_.size(); i-- > 0;)
    out.push_back({buckets_[i].begin, buckets_[i].end - buckets_[i].begin, buffers_[buffer_[i]].f32()});
  return out;
}

BucketStaging ZeroGradients::staging() {
  BucketStaging s;
  for (std::size_t i = 0; i < buckets_.size(); ++i) s.data.push_back(buffers_[buffer_[i]].f32());
  s.reuses = reuses_;
  s.on_reduced = [this](std::size_t i) {
    std::memcpy(shard_.f32() + packed_[i], buffers_[buffer_[i]].f32() + own_[i].offset,
                static_cast<std::size_t>(own_[i].count) * sizeof(float));
  };
  return s;
}

std::int64_t ZeroGradients::bytes() const {
  std::size_t n = allocated_bytes(shard_);
  for (const Tensor& b : buffers_) n += allocated_bytes(b);
  return static_cast<std::int64_t>(n);
}

}  // namespace ringtrain
