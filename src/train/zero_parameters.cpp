// ZeroParameters (see header). The gathers run in the order the passes need them, the same on
// every rank (the model's layer order decides it), so with a comm thread they simply queue up
// behind (or ahead of) the gradient buckets' reduce-scatters.
#include "train/zero_parameters.hpp"

#include <algorithm>
#include <chrono>
#include <limits>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/shard.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/monitor/tracer.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {
namespace {
constexpr std::size_t kNever = std::numeric_limits<std::size_t>::max();
}  // namespace

ZeroParameters::ZeroParameters(Model& model, const std::vector<Bucket>& buckets, int world, int rank,
                               Communicator& comm, CommThread* thread, Tracer* tracer)
    : model_(model), arena_(model.params().f32()), comm_(comm), thread_(thread), tracer_(tracer) {
  for (const Bucket& b : buckets) {
    const ArenaRange own = shard_range(b.end - b.begin, world, rank);
    groups_.push_back({b, {b.begin + own.offset, own.count}});
  }
  auto group_of = [&](std::int64_t offset) {
    for (std::size_t g = 0; g < groups_.size(); ++g)
      if (groups_[g].range.begin <= offset && offset < groups_[g].range.end) return g;
    throw Error(fmt::format("ZeRO stage 3: arena element {} is in no bucket", offset));
  };
  for (const Pass pass : {Pass::forward, Pass::backward}) {
    std::vector<Use>& list = pass == Pass::forward ? forward_ : backward_;
    for (const std::size_t node : model.param_users(pass)) {
      Use use{node, {}};
      for (const ArenaRange& r : model.node_param_ranges(node)) {
        const std::size_t first = group_of(r.offset), last = group_of(r.end() - 1);
        for (std::size_t g = std::min(first, last); g <= std::max(first, last); ++g)
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
  for (std::size_t g = 0; g < groups_.size(); ++g) drop(g);
  gathered_peak_ = 0;
  model_.set_parameter_residency(this);
}

ZeroParameters::~ZeroParameters() { model_.set_parameter_residency(nullptr); }

std::int64_t ZeroParameters::foreign_bytes(const Group& g) const {
  return (g.range.end - g.range.begin - g.own.count) * static_cast<std::int64_t>(sizeof(float));
}

std::int64_t ZeroParameters::kept_bytes() const {
  std::int64_t n = 0;
  for (const Group& g : groups_) n += g.own.count;
  return n * static_cast<std::int64_t>(sizeof(float));
}

void ZeroParameters::request(std::size_t g) {
  Group& group = groups_[g];
  if (group.state != State::released) return;
  group.state = State::gathering;
  gathered_ += foreign_bytes(group);
  gathered_peak_ = std::max(gathered_peak_, gathered_);
  float* data = arena_ + group.range.begin;
  const auto count = static_cast<std::size_t>(group.range.end - group.range.begin);
  auto trace = [tracer = tracer_, g](CommThread::Clock::time_point begin, CommThread::Clock::time_point end) {
    if (tracer != nullptr) tracer->span(fmt::format("allgather group {}", g), "comm", begin, end, Tracer::kComm);
  };
  if (thread_ != nullptr) {
    group.ticket = thread_->allgather(data, count, DType::f32, trace);
    return;
  }
  const auto begin = CommThread::Clock::now();
  comm_.allgather(data, count, DType::f32);
  trace(begin, CommThread::Clock::now());
  group.state = State::resident;
}

void ZeroParameters::ensure(std::size_t g) {
  request(g);
  Group& group = groups_[g];
  if (group.state == State::gathering) thread_->wait_for(group.ticket);
  group.state = State::resident;
}

void ZeroParameters::drop(std::size_t g) {
  Group& group = groups_[g];
  if (group.state == State::gathering) thread_->wait_for(group.ticket);  // never while it is being written
  if (group.state != State::released) gathered_ -= foreign_bytes(group);
  group.state = State::released;
  release_host_pages(arena_ + group.range.begin, group.own.offset - group.range.begin);
  release_host_pages(arena_ + group.own.end(), group.range.end - group.own.end());
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
  // Prefetch: the groups of the next use that needs any gathered, while this one computes.
  for (std::size_t u = cursor_ + 1; u < list.size(); ++u) {
    const std::vector<std::size_t>& next = list[u].groups;
    if (std::all_of(next.begin(), next.end(), [&](std::size_t g) { return groups_[g].state != State::released; }))
      continue;
    for (const std::size_t g : next) request(g);
    break;
  }
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
  for (std::size_t g = 0; g < groups_.size(); ++g) request(g);
  for (std::size_t g = 0; g < groups_.size(); ++g) ensure(g);
}

void ZeroParameters::release_all() {
  for (std::size_t g = 0; g < groups_.size(); ++g) drop(g);
}

void ZeroParameters::for_each_gathered(const std::function<void(const float* data, std::int64_t count)>& fn) {
  for (std::size_t g = groups_.size(); g-- > 0;) {  // buckets run from the end of the arena
    const bool was_resident = groups_[g].state == State::resident;
    ensure(g);
    fn(arena_ + groups_[g].range.begin, groups_[g].range.end - groups_[g].range.begin);
    if (!was_resident) drop(g);
  }
}

}  // namespace ringtrain
