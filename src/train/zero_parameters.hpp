// ZeRO stage 3's parameter memory: a rank keeps only its shard of every gradient bucket of the
// parameter arena; the rest of a bucket's pages go back to the operating system until the bucket
// (a group of whole layers, gathered as one) is allgathered again, just before the first layer
// that uses it runs in a forward or backward pass. Meanwhile the pass's next group is gathered
// ahead on the comm thread. A group is released after its last use in a pass, except that after
// a training forward the groups backward starts with stay. The gathers copy the owners' values
// exactly, so every layer computes on the same parameters as without sharding.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "ringtrain/comm/comm_thread.hpp"
#include "ringtrain/comm/grad_bucketer.hpp"
#include "ringtrain/nn/model.hpp"

namespace ringtrain {

class Communicator;
class Tracer;

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

  void gather_all() override;
  void release_all() override;
  // Collective: fn on the arena group by group, in arena order, each gathered while fn reads it
  // (a checksum of all parameters without holding them all at once).
  void for_each_gathered(const std::function<void(const float* data, std::int64_t count)>& fn);

  std::int64_t kept_bytes() const;  // this rank's shards (f32)
  // The most bytes of other ranks' shards gathered at once so far.
  std::int64_t gathered_peak_bytes() const { return gathered_peak_; }

 private:
  enum class State { released, gathering, resident };
  struct Group {
    Bucket range;
    ArenaRange own;  // this rank's shard, arena offsets
    State state = State::released;
    CommThread::Ticket ticket = 0;
  };
  struct Use {
    std::size_t node = 0;
    std::vector<std::size_t> groups;
  };
  void request(std::size_t g);  // starts gathering group g unless it is (being) gathered
  void ensure(std::size_t g);   // group g resident on return
  void drop(std::size_t g);     // releases group g's other shards
  std::int64_t foreign_bytes(const Group& g) const;
  const std::vector<Use>& uses(Pass pass) const { return pass == Pass::forward ? forward_ : backward_; }

  Model& model_;
  float* arena_;
  Communicator& comm_;
  CommThread* thread_;
  Tracer* tracer_;
  std::vector<Group> groups_;               // launch order, as the buckets
  std::vector<Use> forward_, backward_;     // the passes' parameter users in order
  std::vector<std::size_t> last_forward_;   // per group: its last use in forward
  std::vector<std::size_t> last_backward_;  // per group: its last use in backward
  std::vector<bool> kept_for_backward_;     // per group: used by backward's first user
  Pass pass_ = Pass::forward;
  bool training_ = false;
  std::size_t cursor_ = 0;  // the pass's next use
  std::int64_t gathered_ = 0, gathered_peak_ = 0;
};

}  // namespace ringtrain
