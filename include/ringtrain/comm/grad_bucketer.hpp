// Gradient buckets: contiguous slices of the flat gradient arena, planned from its end (the
// last layers' gradients are final first during backward). GradBucketer launches each
// bucket's allreduce as soon as backward has finished every gradient in it — on a
// CommThread when overlapping, or in the same order after backward on the plain path, so
// both paths compute bitwise identical sums. Under ZeRO the buckets are reduce-scattered
// instead: each rank keeps the sums of its shard of every bucket (bucket_shards).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "ringtrain/comm/comm_thread.hpp"
#include "ringtrain/core/device.hpp"
#include "ringtrain/tensor/arena_range.hpp"

namespace ringtrain {

class Communicator;
class Tracer;

struct Bucket {
  std::int64_t begin = 0;  // first element in the arena
  std::int64_t end = 0;    // one past the last
};

// Buckets covering [0, num_elements) exactly once, in launch order (from the end of the
// arena). Buckets are cut only at `cuts` (ascending arena offsets where a layer's
// parameters start; a layer is never split, as in PyTorch DDP): a bucket closes at the first
// cut at which it holds at least its target, first_bucket_elements for the first bucket and
// bucket_elements after. Both targets must be > 0.
std::vector<Bucket> plan_buckets(std::int64_t num_elements, const std::vector<std::int64_t>& cuts,
                                 std::int64_t bucket_elements, std::int64_t first_bucket_elements);

// Rank `rank`'s shard of the arena: its shard_range of every bucket, in arena order.
std::vector<ArenaRange> bucket_shards(const std::vector<Bucket>& buckets, int size, int rank);

// What a bucket's collective leaves on every rank: the whole sum, or the sum of its shard.
enum class BucketReduction { allreduce, reduce_scatter };

struct BucketTimes {
  double exposed_s = 0.0;    // from the end of backward until the last bucket was reduced
  double allreduce_s = 0.0;  // sum of the buckets' allreduce durations (enqueued ones: the enqueue calls and
                             // their device time, Communicator::complete)
};

// Where each bucket's gradients are while backward writes them, when not in one arena (ZeRO
// stage 2): its own buffer, which a later bucket may take over once it is reduced.
struct BucketStaging {
  std::vector<float*> data;  // per bucket (launch order): its gradients, in arena order
  std::vector<int> reuses;   // per bucket: the earlier bucket whose buffer it takes over, or -1
  // Called once a bucket is reduced, on the thread that reduced it (then its buffer may go).
  std::function<void(std::size_t index)> on_reduced;
  // Per bucket (may be empty): ranges of its data (from its start) that backward does not write
  // (the parameter arena's alignment pads), zeroed once the bucket is ready, before it is read:
  // its buffer held another bucket's gradients before.
  std::vector<std::vector<ArenaRange>> unwritten;
};

class GradBucketer {
 public:
  // grads: the f32 arena of num_elements; comm: used only for gradient buckets (by the
  // comm thread when overlap is on). tracer may be null. With `staging` the buckets' gradients
  // are where it says instead of in `grads` (which may then be null), and without overlap each
  // bucket is reduced as soon as it is ready rather than after backward (the same sums in the
  // same order), as its buffer may be needed again. `device`: where the gradients, the staging
  // and the carry live; the bucketer's own element-wise work (adding the carry, accumulating,
  // zeroing) runs there (on a GPU: on the compute stream, queued before the collective reads it).
  GradBucketer(float* grads, std::int64_t num_elements, std::vector<Bucket> buckets, Communicator& comm, bool overlap,
               Tracer* tracer, BucketReduction reduction = BucketReduction::allreduce,
               std::optional<BucketStaging> staging = std::nullopt, Device device = Device::cpu);

  // Starts a step. `carry` (nullable, num_elements floats) is added to each bucket's
  // gradients just before it is reduced: gradients accumulated over earlier micro-batches.
  void begin_step(const float* carry);
  // Starts an earlier micro-batch of a step (staging only): each bucket, once ready, is stored
  // into `carry` (the first micro-batch) or added to it, and not reduced.
  void begin_accumulation(float* carry, bool first);
  // Backward's hook: every gradient from element ready_from to the end is final. With staging,
  // returns once the next bucket's buffer is free to write.
  void on_ready(std::int64_t ready_from);
  // After backward: launches what is left, waits for every bucket, returns the timings. With
  // on_device, the collectives a device communicator enqueued are not waited for on the host:
  // the compute stream is ordered after them (Communicator::join_on_device), and the caller
  // completes them (Communicator::complete) when it needs the host to know.
  BucketTimes finish(bool on_device = false);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  bool overlap() const { return thread_ != nullptr; }
  // The thread the buckets are reduced on (null on the plain path); others may queue their
  // collectives on it too (ZeRO stage 3's parameter allgathers), in the same order on every rank.
  CommThread* comm_thread() const { return thread_.get(); }

 private:
  void launch(std::size_t index);
  // Staging: blocks until bucket `index`'s buffer is no longer being reduced for another bucket.
  void wait_for_buffer(std::size_t index);
  // Staging: zeroes what backward left unwritten in bucket `index` (BucketStaging::unwritten).
  void clear_unwritten(std::size_t index);

  std::int64_t num_elements_;
  Device device_;
  std::vector<Bucket> buckets_;
  std::vector<float*> data_;  // per bucket: where its gradients are
  std::optional<BucketStaging> staging_;
  Communicator& comm_;
  Tracer* tracer_;
  BucketReduction reduction_;
  std::unique_ptr<CommThread> thread_;       // null on the plain path
  std::vector<CommThread::Ticket> tickets_;  // per bucket: its job on thread_ in this step
  const float* carry_ = nullptr;
  float* accumulate_into_ = nullptr;  // begin_accumulation's carry, until begin_step
  bool first_micro_batch_ = false;
  std::size_t next_ = 0;      // next bucket to launch
  double allreduce_s_ = 0.0;  // written by the comm thread, read after wait_all
};

}  // namespace ringtrain
