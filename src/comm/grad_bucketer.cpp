// plan_buckets and GradBucketer (see header).
#include "ringtrain/comm/grad_bucketer.hpp"

#include <algorithm>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/shard.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/monitor/tracer.hpp"
#include "tensor/device_ops.hpp"

namespace ringtrain {
namespace {

// The bytes of n floats: the bucketer's copies and zero-fills go through the device's operations
// (tensor/device_ops.hpp; on the GPU queued on the compute stream in call order).
std::size_t float_bytes(std::int64_t n) { return static_cast<std::size_t>(n) * sizeof(float); }

}  // namespace

std::vector<Bucket> plan_buckets(std::int64_t num_elements, const std::vector<std::int64_t>& cuts,
                                 std::int64_t bucket_elements, std::int64_t first_bucket_elements) {
  RT_REQUIRE(bucket_elements > 0 && first_bucket_elements > 0, ConfigError,
             "comm.bucket_mb and comm.first_bucket_mb must be > 0");
  std::vector<Bucket> out;
  std::int64_t end = num_elements;
  for (auto cut = cuts.rbegin(); cut != cuts.rend(); ++cut) {
    if (*cut >= end) continue;  // duplicate or empty layer
    const std::int64_t target = out.empty() ? first_bucket_elements : bucket_elements;
    if (end - *cut >= target || *cut == 0) {
      out.push_back(Bucket{*cut, end});
      end = *cut;
    }
  }
  if (end > 0) out.push_back(Bucket{0, end});  // no cut at 0: the rest is one bucket
  return out;
}

std::vector<ArenaRange> bucket_shards(const std::vector<Bucket>& buckets, int size, int rank) {
  std::vector<ArenaRange> out;
  for (const Bucket& b : buckets) {
    const ArenaRange s = shard_range(b.end - b.begin, size, rank);
    if (s.count > 0) out.push_back({b.begin + s.offset, s.count});
  }
  std::sort(out.begin(), out.end(), [](const ArenaRange& a, const ArenaRange& b) { return a.offset < b.offset; });
  return out;
}

GradBucketer::GradBucketer(float* grads, std::int64_t num_elements, std::vector<Bucket> buckets, Communicator& comm,
                           bool overlap, Tracer* tracer, BucketReduction reduction,
                           std::optional<BucketStaging> staging, Device device)
    : num_elements_(num_elements),
      device_(device),
      buckets_(std::move(buckets)),
      staging_(std::move(staging)),
      comm_(comm),
      tracer_(tracer),
      reduction_(reduction) {
  std::int64_t covered = num_elements_;  // buckets run from the end of the arena down to 0
  for (const Bucket& b : buckets_) {
    RT_REQUIRE(b.end == covered && b.begin < b.end, Error, "gradient buckets do not tile the arena of {} elements",
               num_elements_);
    covered = b.begin;
  }
  RT_REQUIRE(covered == 0, Error, "gradient buckets do not reach the start of the arena");
  if (staging_) {
    RT_REQUIRE(staging_->data.size() == buckets_.size() && staging_->reuses.size() == buckets_.size(), Error,
               "gradient staging: one buffer and one reuse entry per bucket");
    for (std::size_t i = 0; i < buckets_.size(); ++i)
      RT_REQUIRE(staging_->reuses[i] < static_cast<int>(i), Error, "gradient staging: bucket {} reuses a later one", i);
    data_ = staging_->data;
  } else {
    for (const Bucket& b : buckets_) data_.push_back(grads + b.begin);
  }
  if (overlap) thread_ = std::make_unique<CommThread>(comm_);
  tickets_.assign(buckets_.size(), 0);
}

void GradBucketer::begin_step(const float* carry) {
  carry_ = carry;
  accumulate_into_ = nullptr;
  next_ = 0;
  allreduce_s_ = 0.0;
}

void GradBucketer::begin_accumulation(float* carry, bool first) {
  RT_REQUIRE(staging_.has_value(), Error, "begin_accumulation: for staged buckets only");
  accumulate_into_ = carry;
  first_micro_batch_ = first;
  next_ = 0;
}

void GradBucketer::on_ready(std::int64_t ready_from) {
  if (thread_ == nullptr && !staging_) return;  // the plain path reduces after backward
  while (next_ < buckets_.size() && buckets_[next_].begin >= ready_from) {
    const std::size_t i = next_++;
    clear_unwritten(i);
    if (accumulate_into_ != nullptr) {  // an earlier micro-batch: into the carry, no collective
      const Bucket& b = buckets_[i];
      if (first_micro_batch_)
        device_ops(device_).copy(accumulate_into_ + b.begin, data_[i], float_bytes(b.end - b.begin));
      else
        device_ops(device_).add_into(accumulate_into_ + b.begin, data_[i], b.end - b.begin, DType::f32);
    } else {
      launch(i);
    }
    if (next_ < buckets_.size()) wait_for_buffer(next_);
  }
}

void GradBucketer::clear_unwritten(std::size_t index) {
  if (!staging_ || index >= staging_->unwritten.size()) return;
  for (const ArenaRange& r : staging_->unwritten[index])
    device_ops(device_).zero(data_[index] + r.offset, float_bytes(r.count));
}

void GradBucketer::wait_for_buffer(std::size_t index) {
  if (!staging_ || accumulate_into_ != nullptr || thread_ == nullptr) return;  // nothing is in flight
  const int earlier = staging_->reuses[index];
  if (earlier < 0) return;
  thread_->wait_for(tickets_[static_cast<std::size_t>(earlier)]);
}

void GradBucketer::launch(std::size_t index) {
  const Bucket& b = buckets_[index];
  float* data = data_[index];
  const std::size_t count = static_cast<std::size_t>(b.end - b.begin);
  if (carry_ != nullptr) device_ops(device_).add_into(data, carry_ + b.begin, b.end - b.begin, DType::f32);
  const bool scatter = reduction_ == BucketReduction::reduce_scatter;
  auto done = [this, index, scatter](CommThread::Clock::time_point begin, CommThread::Clock::time_point end) {
    if (staging_ && staging_->on_reduced) staging_->on_reduced(index);
    allreduce_s_ += std::chrono::duration<double>(end - begin).count();
    if (tracer_ != nullptr)
      tracer_->span(fmt::format("{} bucket {}", scatter ? "reduce-scatter" : "allreduce", index), "comm", begin, end,
                    Tracer::kComm);
  };
  if (thread_ != nullptr) {  // a device communicator's collective waits for this bucket's backward only
    const std::uint64_t ready = comm_.mark_inputs_ready();
    if (scatter)
      tickets_[index] = thread_->reduce_scatter_sum(data, count, DType::f32, std::move(done), ready);
    else if (staging_)  // the staging's on_reduced needs the reduced bucket when the job is done
      tickets_[index] = thread_->allreduce_sum(data, count, DType::f32, std::move(done), ready);
    else  // NCCL queues it behind the earlier buckets; finish() completes them all at once
      tickets_[index] = thread_->enqueue_allreduce_sum(data, count, DType::f32, std::move(done), ready);
  } else {
    const auto begin = CommThread::Clock::now();
    if (scatter)
      comm_.reduce_scatter_sum(data, count, DType::f32);
    else
      comm_.allreduce_sum(data, count, DType::f32);
    done(begin, CommThread::Clock::now());
  }
}

BucketTimes GradBucketer::finish(bool on_device) {
  const auto begin = CommThread::Clock::now();
  for (; next_ < buckets_.size(); ++next_) {
    clear_unwritten(next_);
    launch(next_);
  }
  if (thread_ != nullptr) thread_->wait_all();
  if (on_device)
    comm_.join_on_device();
  else
    allreduce_s_ += comm_.complete();  // enqueued collectives: their device time
  BucketTimes t;
  t.exposed_s = std::chrono::duration<double>(CommThread::Clock::now() - begin).count();
  t.allreduce_s = allreduce_s_;
  return t;
}

}  // namespace ringtrain
