// ZeroParameters (see header). The gathers run in the order the passes need them, the same on
// every rank (the model's layer order decides it), so with a comm thread they simply queue up
// behind (or ahead of) the gradient buckets' reduce-scatters.
#include "train/zero_parameters.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/shard.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/monitor/tracer.hpp"
#include "ringtrain/tensor/tensor_ops.hpp"

namespace ringtrain {
namespace {
constexpr std::size_t kNever = std::numeric_limits<std::size_t>::max();
// Pool buffer sizes: 64 steps per power of two (at most 1/64 more than asked for).
std::int64_t pool_size(std::int64_t count) {
  std::int64_t granule = 1;
  while (granule * 128 <= count) granule *= 2;
  return (count + granule - 1) / granule * granule;
}
}  // namespace

Tensor GatherPool::take(std::int64_t count) {
  count = pool_size(count);  // groups of nearly one size share buffers
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (it->numel() >= count && (best == free_.end() || it->numel() < best->numel())) best = it;
  if (best == free_.end()) {
    bytes_ += count * static_cast<std::int64_t>(dtype_size(dtype_));
    return Tensor::empty(Shape{count}, dtype_, device_);
  }
  Tensor buffer = std::move(*best);
  free_.erase(best);
  return buffer;
}

void GatherPool::give(Tensor buffer) { free_.push_back(std::move(buffer)); }

ZeroParameters::ZeroParameters(Model& model, const std::vector<Bucket>& buckets, int world, int rank,
                               Communicator& comm, CommThread* thread, Tracer* tracer)
    : model_(model),
      device_(model.device()),
      comm_(comm),
      thread_(thread),
      tracer_(tracer),
      pool_(DType::f32, device_),
      compute_pool_(model.compute_dtype(), device_) {
  const std::vector<Model::ParamTensor> tensors = model.param_tensors();
  auto splits_a_tensor = [&](std::int64_t at) {
    return std::any_of(tensors.begin(), tensors.end(),
                       [&](const Model::ParamTensor& t) { return t.offset < at && at < t.offset + t.shape.numel(); });
  };
  for (const Bucket& b : buckets) {  // from the end of the arena: a group grows downwards
    const ArenaRange own = shard_range(b.end - b.begin, world, rank);
    const Part part{b, {b.begin + own.offset, own.count}};
    if (!groups_.empty() && splits_a_tensor(groups_.back().range.begin)) {
      groups_.back().range.begin = b.begin;
      groups_.back().parts.push_back(part);
    } else {
      Group group;
      group.range = b;
      group.parts.push_back(part);
      groups_.push_back(std::move(group));
    }
  }
  for (const Pass pass : {Pass::forward, Pass::backward}) {
    std::vector<Use>& list = pass == Pass::forward ? forward_ : backward_;
    for (const std::size_t node : model.param_users(pass)) {
      Use use{node, {}};
      for (const ArenaRange& r : model.node_param_ranges(node)) {
        const std::size_t g = group_of(r.offset);
        RT_REQUIRE(group_of(r.end() - 1) == g, Error, "ZeRO stage 3: a bucket splits model.layers[{}]", node);
        if (std::find(use.groups.begin(), use.groups.end(), g) == use.groups.end()) use.groups.push_back(g);
      }
      list.push_back(std::move(use));
    }
  }
  last_forward_.assign(groups_.size(), kNever);
  last_backward_.assign(groups_.size(), kNever);
  kept_for_backward_.assign(groups_.size(), false);
  for (std::size_t u = 0; u < forward_.size(); ++u)
    for (const std::size_t g : forward_[u].groups) last_forward_[g] = u;
  for (std::size_t u = 0; u < backward_.size(); ++u)
    for (const std::size_t g : backward_[u].groups) last_backward_[g] = u;
  if (!backward_.empty())
    for (const std::size_t g : backward_.front().groups) kept_for_backward_[g] = true;
  model_.set_parameter_residency(this);  // a GPU arena moves into reservable memory
  arena_ = std::as_const(model_).params().f32();
  try {
    release_all();  // the arena keeps this rank's shards only
  } catch (...) {
    model_.set_parameter_residency(nullptr);
    throw;
  }
}

ZeroParameters::~ZeroParameters() { model_.set_parameter_residency(nullptr); }

std::size_t ZeroParameters::group_of(std::int64_t offset) const {
  for (std::size_t g = 0; g < groups_.size(); ++g)
    if (groups_[g].range.begin <= offset && offset < groups_[g].range.end) return g;
  throw Error(fmt::format("ZeRO stage 3: arena element {} is in no bucket", offset));
}

std::int64_t ZeroParameters::kept_bytes() const {
  if (device_ == Device::cuda) return reserved_mapped_bytes(arena_);  // whole granules: a little more than the shards
  std::int64_t n = 0;
  for (const Group& g : groups_)
    for (const Part& p : g.parts) n += p.own.count;
  return n * static_cast<std::int64_t>(sizeof(float));
}

void ZeroParameters::request(std::size_t g, float* into) {
  Group& group = groups_[g];
  if (group.state != State::released) return;
  const std::int64_t count = group.range.end - group.range.begin;
  if (into == nullptr) {  // the own shards first (on a GPU queued before the collective, which waits for them)
    group.buffer = pool_.take(count);
    into = group.buffer.f32();
    for (const Part& p : group.parts)
      copy_into(Tensor::wrap(into + (p.own.offset - group.range.begin), Shape{p.own.count}, DType::f32, device_),
                Tensor::wrap(arena_ + p.own.offset, Shape{p.own.count}, DType::f32, device_));
  }
  group.data = into;
  group.state = State::gathering;
  auto trace = [tracer = tracer_, g](CommThread::Clock::time_point begin, CommThread::Clock::time_point end) {
    if (tracer != nullptr) tracer->span(fmt::format("allgather group {}", g), "comm", begin, end, Tracer::kComm);
  };
  for (const Part& p : group.parts) {  // the comm thread runs its jobs in order: the last ticket is the group's
    float* at = into + (p.bucket.begin - group.range.begin);
    const auto n = static_cast<std::size_t>(p.bucket.end - p.bucket.begin);
    if (thread_ != nullptr) {
      group.ticket = thread_->allgather(at, n, DType::f32, trace);
      continue;
    }
    const auto begin = CommThread::Clock::now();
    comm_.allgather(at, n, DType::f32);
    trace(begin, CommThread::Clock::now());
  }
  if (thread_ == nullptr) group.state = State::resident;
}

void ZeroParameters::ensure(std::size_t g, float* into) {
  request(g, into);
  Group& group = groups_[g];
  if (group.state == State::gathering) thread_->wait_for(group.ticket);
  group.state = State::resident;
}

void ZeroParameters::drop(std::size_t g) {
  Group& group = groups_[g];
  if (group.state == State::gathering) thread_->wait_for(group.ticket);  // never while it is being written
  group.state = State::released;
  group.data = nullptr;
  if (group.compute.raw() != nullptr) {
    compute_pool_.give(std::move(group.compute));
    group.compute = Tensor();
  }
  if (group.buffer.raw() != nullptr) {
    pool_.give(std::move(group.buffer));
    group.buffer = Tensor();
    return;
  }
  for (const Part& p : group.parts) {
    release_pages(arena_ + p.bucket.begin, p.own.offset - p.bucket.begin, device_);
    release_pages(arena_ + p.own.end(), p.bucket.end - p.own.end(), device_);
  }
}

float* ZeroParameters::where(std::int64_t offset) {
  const Group& group = groups_[group_of(offset)];
  RT_REQUIRE(group.state == State::resident, Error, "ZeRO stage 3: arena element {} used while not gathered", offset);
  return group.data + (offset - group.range.begin);
}

void* ZeroParameters::compute_where(std::int64_t offset) {
  Group& group = groups_[group_of(offset)];
  RT_REQUIRE(group.state == State::resident, Error, "ZeRO stage 3: arena element {} used while not gathered", offset);
  const std::int64_t count = group.range.end - group.range.begin;
  if (group.compute.raw() == nullptr) {
    group.compute = compute_pool_.take(count);
    cast_into(group.compute.rows(0, count), Tensor::wrap(group.data, Shape{count}, DType::f32, device_));
  }
  return static_cast<char*>(group.compute.raw()) +
         (offset - group.range.begin) * static_cast<std::int64_t>(dtype_size(group.compute.dtype()));
}

void ZeroParameters::begin_pass(Pass pass, bool training) {
  pass_ = pass;
  training_ = training;
  cursor_ = 0;
  if (!uses(pass).empty())
    for (const std::size_t g : uses(pass).front().groups) request(g);
}

void ZeroParameters::acquire(std::size_t node, Pass pass) {
  const std::vector<Use>& list = uses(pass);
  RT_REQUIRE(pass == pass_ && cursor_ < list.size() && list[cursor_].node == node, Error,
             "ZeRO stage 3: model.layers[{}] used its parameters out of the planned order", node);
  for (const std::size_t g : list[cursor_].groups) ensure(g);
  // Prefetch the next use's groups while this one computes (one use ahead: what is gathered at
  // once stays the current use's and the next one's groups).
  if (cursor_ + 1 < list.size())
    for (const std::size_t g : list[cursor_ + 1].groups) request(g);
}

void ZeroParameters::release(std::size_t node, Pass pass) {
  const std::vector<Use>& list = uses(pass);
  RT_REQUIRE(pass == pass_ && cursor_ < list.size() && list[cursor_].node == node, Error,
             "ZeRO stage 3: model.layers[{}] released its parameters out of the planned order", node);
  const std::vector<std::size_t>& last = pass == Pass::forward ? last_forward_ : last_backward_;
  for (const std::size_t g : list[cursor_].groups) {
    const bool keep = pass == Pass::forward && training_ && kept_for_backward_[g];
    if (last[g] == cursor_ && !keep) drop(g);
  }
  ++cursor_;
}

void ZeroParameters::gather_all() {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    RT_REQUIRE(groups_[g].state == State::released, Error, "ZeRO stage 3: gather_all during a pass");
    const Bucket& range = groups_[g].range;
    commit_pages(arena_ + range.begin, range.end - range.begin, device_);
    request(g, arena_ + range.begin);
  }
  for (std::size_t g = 0; g < groups_.size(); ++g) ensure(g);
}

void ZeroParameters::release_all() {
  for (std::size_t g = 0; g < groups_.size(); ++g) drop(g);
}

void ZeroParameters::for_each_gathered(const std::function<void(const float* data, std::int64_t count)>& fn) {
  for (std::size_t g = groups_.size(); g-- > 0;) {  // buckets run from the end of the arena
    ensure(g);
    const std::int64_t count = groups_[g].range.end - groups_[g].range.begin;
    const Tensor host = to_host(Tensor::wrap(groups_[g].data, Shape{count}, DType::f32, device_));
    fn(host.f32(), count);
    drop(g);
  }
}

}  // namespace ringtrain
