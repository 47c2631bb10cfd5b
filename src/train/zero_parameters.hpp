// ZeRO stage 3's parameter memory: a rank keeps only its shard of every gradient bucket of the
// parameter arena (the rest of the arena's pages go back to the operating system). A bucket's
// layers are a group gathered as one: just before the first layer that uses it runs in a forward
// or backward pass, the group is allgathered into a buffer of a pool (this rank's shard copied
// in first) and the layers compute on that copy; meanwhile the pass's next group is gathered
// ahead on the comm thread (one use ahead). A group's buffer goes back to the pool after its last use in the
// pass, except that after a training forward the groups backward starts with stay. The pool's
// buffers stay resident and are reused, so a gather costs no page faults; the pool holds what
// the passes need at once. The gathers copy the owners' values exactly, so every layer computes
// on the same parameters as without sharding.
//
// On a GPU the arena is reserved device memory (Tensor::reservable) whose granules outside this
// rank's shards are unmapped, the pool's buffers are device memory, and the gathers are the
// communicator's (NCCL's) on device memory: the own-shard copy is queued on the default stream,
// which the collective waits for, and the collective has completed when the comm thread's job
// has, so the compute thread's wait for a group is a host wait (not yet an event on the compute
// stream). A model computing in bf16/f16 gets each group's compute copy cast from the gathered
// f32 at its first use in a pass, into a buffer of a second pool.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "ringtrain/comm/comm_thread.hpp"
#include "ringtrain/comm/grad_bucketer.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

class Communicator;
class Tracer;

// Buffers of one dtype on one device handed out for gathered groups and taken back for reuse:
// the smallest free one that is large enough, or a new one (sizes rounded up by at most 1/64,
// so groups of nearly one size share them).
class GatherPool {
 public:
  GatherPool(DType dtype, Device device) : dtype_(dtype), device_(device) {}
  Tensor take(std::int64_t count);  // at least count elements
  void give(Tensor buffer);
  std::int64_t bytes() const { return bytes_; }  // every buffer made so far

 private:
  DType dtype_;
  Device device_;
  std::vector<Tensor> free_;
  std::int64_t bytes_ = 0;
};

class ZeroParameters : public ParameterResidency {
 public:
  // buckets: in launch order (bucket_shards' layout). thread: the bucketer's comm thread, or null
  // to gather on the calling thread. Attaches itself to the model (set_parameter_residency) and
  // releases every other rank's shard from the arena.
  ZeroParameters(Model& model, const std::vector<Bucket>& buckets, int world, int rank, Communicator& comm,
                 CommThread* thread, Tracer* tracer);
  ~ZeroParameters() override;  // detaches from the model
  ZeroParameters(const ZeroParameters&) = delete;
  ZeroParameters& operator=(const ZeroParameters&) = delete;

  void begin_pass(Pass pass, bool training) override;
  void acquire(std::size_t node, Pass pass) override;
  void release(std::size_t node, Pass pass) override;
  float* where(std::int64_t offset) override;
  void* compute_where(std::int64_t offset) override;
  // Between passes: every group allgathered into the arena itself, then released from it.
  void gather_all() override;
  void release_all() override;
  // Collective: fn on the arena group by group, in arena order, each gathered while fn reads it
  // (a checksum of all parameters without holding them all at once); host memory (a GPU
  // group's copy).
  void for_each_gathered(const std::function<void(const float* data, std::int64_t count)>& fn);

  // This rank's shards (f32); on a GPU the arena's mapped granules, which hold them.
  std::int64_t kept_bytes() const;
  // The gathered copies' pools: the most the passes held at once (and reuse).
  std::int64_t gathered_bytes() const { return pool_.bytes() + compute_pool_.bytes(); }

 private:
  enum class State { released, gathering, resident };
  // A group gathers whole parameter tensors: the buckets that split one (a GPT's token table,
  // whose gradient is reduced in row blocks) are one group, each bucket allgathered in its place.
  struct Part {
    Bucket bucket;
    ArenaRange own;  // this rank's shard of the bucket, arena offsets
  };
  struct Group {
    Bucket range;             // the parts' union
    std::vector<Part> parts;  // launch order
    State state = State::released;
    CommThread::Ticket ticket = 0;
    float* data = nullptr;  // where the gathered group is: its pool buffer, or the arena (gather_all)
    Tensor buffer;          // from the pool while gathered there
    Tensor compute;         // from the compute pool once compute_where asked (GPU, bf16/f16)
  };
  struct Use {
    std::size_t node = 0;
    std::vector<std::size_t> groups;
  };
  // Starts gathering group g into `into` (its pool buffer when null) unless it is (being) gathered.
  void request(std::size_t g, float* into = nullptr);
  void ensure(std::size_t g, float* into = nullptr);  // group g resident on return
  void drop(std::size_t g);                           // its buffer back to the pool (or its arena pages released)
  std::size_t group_of(std::int64_t offset) const;
  const std::vector<Use>& uses(Pass pass) const { return pass == Pass::forward ? forward_ : backward_; }

  Model& model_;
  Device device_;
  float* arena_ = nullptr;  // the model's (moved into reservable memory on a GPU)
  Communicator& comm_;
  CommThread* thread_;
  Tracer* tracer_;
  GatherPool pool_, compute_pool_;
  std::vector<Group> groups_;               // launch order, as the buckets (from the end of the arena)
  std::vector<Use> forward_, backward_;     // the passes' parameter users in order
  std::vector<std::size_t> last_forward_;   // per group: its last use in forward
  std::vector<std::size_t> last_backward_;  // per group: its last use in backward
  std::vector<bool> kept_for_backward_;     // per group: used by backward's first user
  Pass pass_ = Pass::forward;
  bool training_ = false;
  std::size_t cursor_ = 0;  // the pass's next use
};

}  // namespace ringtrain
