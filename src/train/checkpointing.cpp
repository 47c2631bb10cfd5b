// TrainCheckpoints (see header). A checkpoint resumes on any world size as long as the global
// batch is the same: parameters and optimizer state are stored whole (world-size and ZeRO-stage
// independent),
// the memory strategy's global batches do not depend on the world size, and every random
// draw is keyed by (seed, step or epoch, index), so there is no RNG state to carry over.
// Precision may change on resume (master weights and optimizer state are f32 in every
// precision); the loss scaler's state carries over only from fp16 to fp16. Device (GPU) state
// goes through host copies: downloaded before a save, uploaded after a resume.
#include "train/checkpointing.hpp"

#include <algorithm>
#include <utility>

#include "ringtrain/comm/watchdog.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/data/dataset.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/grad_scaler.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"
#include "ringtrain/train/train_config.hpp"
#include "train/run_report.hpp"

namespace ringtrain {
namespace {

// Frees what one save or resume held (the stage 3 parameter shard copy, the host staging),
// however that ends.
struct HeldForOneTransfer {
  Tensor& shard;
  std::vector<TrainCheckpoints::Staged>& staged;
  ~HeldForOneTransfer() {
    shard = Tensor();
    staged.clear();
  }
};

// Unpacks the host buffers a save packed in place (TrainCheckpoints::unpack_host_sources).
struct UnpackedOnExit {
  const TrainCheckpoints& checkpoints;
  ~UnpackedOnExit() { checkpoints.unpack_host_sources(); }
};

}  // namespace

TrainCheckpoints::TrainCheckpoints(const Context& ctx, const TrainConfig& tc, Model& model, Optimizer& optimizer,
                                   GradScaler& scaler, std::string resolved_config, std::int64_t global_batch,
                                   Watchdog& watchdog)
    : ctx_(ctx),
      tc_(tc),
      model_(model),
      optimizer_(optimizer),
      scaler_(scaler),
      resolved_config_(std::move(resolved_config)),
      global_batch_(global_batch),
      watchdog_(watchdog) {
  if (!tc.checkpoint.enabled) return;
  // Creating, locking, probing and cleaning the directory: metadata operations, watched like a
  // collective (a stalled file system on rank 0 would otherwise hold every rank at start).
  const WatchedScope watch(watchdog_, fmt::format("opening checkpoint.dir {}", tc.checkpoint.dir));
  dir_ = std::make_unique<CheckpointDir>(ctx, tc.checkpoint.dir, tc.checkpoint.keep);
}

float* TrainCheckpoints::staged(const std::string& name, const Tensor& t,
                                std::optional<ParamLayout::Packing> packing) const {
  if (packing && packing->identity()) packing.reset();
  const bool on_host = t.device() == Device::cpu;
  if (on_host && !packing) return t.f32();
  staged_.push_back({name, t, on_host ? Tensor() : Tensor::empty(t.shape()), std::move(packing)});
  return staged_.back().file_data();
}

CheckpointBuffer TrainCheckpoints::arena_buffer(const std::string& name, const Tensor& t,
                                                const std::vector<ArenaRange>* shard, bool optional) const {
  const ParamLayout& layout = model_.param_layout();
  ParamLayout::Packing packing = shard != nullptr ? layout.packing(*shard) : layout.packing_of_arena();
  CheckpointBuffer b{name, nullptr, model_.num_params(), false, optional, shard != nullptr};
  if (b.sharded) b.owned = packing.logical;
  b.data = staged(name, t, std::move(packing));
  return b;
}

void TrainCheckpoints::download() const {
  for (Staged& s : staged_) {
    if (s.host.raw() != nullptr) copy_into(s.host, s.source);
    if (!s.packing) continue;
    pack(*s.packing, s.file_data(), s.file_data());
    s.host_packed = s.host.raw() == nullptr;
  }
}

void TrainCheckpoints::upload() const {
  for (const Staged& s : staged_) {
    if (!restored(s.name)) continue;
    if (s.packing) unpack(*s.packing, s.file_data(), s.file_data());
    if (s.host.raw() != nullptr) copy_into(s.source, s.host);
  }
}

void TrainCheckpoints::unpack_host_sources() const {
  for (Staged& s : staged_)
    if (s.host_packed && s.packing) {  // download() packs only what has a packing
      unpack(*s.packing, s.file_data(), s.file_data());
      s.host_packed = false;
    }
}

bool TrainCheckpoints::sharded_params() const { return tc_.zero_stage >= 3; }

// The arena's owned ranges (on the model's device) and their packed places in the host shard.
void TrainCheckpoints::pack_params() const {
  if (!sharded_params()) return;
  const Tensor& arena = std::as_const(model_).params();
  for_each_owned({{0, model_.arena_elements()}}, optimizer_.owned(),
                 [&](std::int64_t offset, std::int64_t packed, std::int64_t count) {
                   copy_into(param_shard_.rows(packed, count), arena.rows(offset, count));
                 });
}

void TrainCheckpoints::unpack_params() {
  if (!sharded_params()) return;
  const Tensor& arena = model_.params();  // non-const: the compute copy is refreshed
  for_each_owned({{0, model_.arena_elements()}}, optimizer_.owned(),
                 [&](std::int64_t offset, std::int64_t packed, std::int64_t count) {
                   copy_into(arena.rows(offset, count), param_shard_.rows(packed, count));
                 });
}

// Collective: made on every rank under one agreement, as they allocate (the gathered
// parameter shard under ZeRO-3, host copies of GPU tensors): a rank that runs out of memory
// fails every rank alike instead of leaving them in the transfer.
std::vector<CheckpointBuffer> TrainCheckpoints::buffers() const {
  std::vector<CheckpointBuffer> b;
  run_collectively(ctx_, [&] {
    if (sharded_params()) {  // allocated for one save or resume only
      if (param_shard_.raw() == nullptr) param_shard_ = Tensor::empty(Shape{total_count(optimizer_.owned())});
      b.push_back(arena_buffer("params", param_shard_, &optimizer_.owned(), false));
    } else {
      b.push_back(arena_buffer("params", model_.params(), nullptr, false));
    }
    // Under ZeRO each rank holds its shard of the optimizer state; the file holds it whole.
    const bool sharded = optimizer_.state_elements() != model_.arena_elements();
    for (Optimizer::StateBuffer& s : optimizer_.state())
      b.push_back(arena_buffer("optimizer/" + s.name, s.tensor, sharded ? &optimizer_.owned() : nullptr, false));
    // BatchNorm running statistics come from each rank's own batches until evaluation
    // averages them, so they are saved per rank.
    std::vector<Tensor> model_buffers = model_.buffers();
    for (std::size_t i = 0; i < model_buffers.size(); ++i)
      b.push_back({fmt::format("model_buffers/{}", i),
                   staged(fmt::format("model_buffers/{}", i), model_buffers[i], std::nullopt), model_buffers[i].numel(),
                   true});
    for (const auto& [name, tensor] : extra_) b.push_back(arena_buffer(name, tensor, nullptr, true));
  });
  return b;
}

void TrainCheckpoints::add_replicated(std::string name, const Tensor& arena_shaped) {
  RT_REQUIRE(arena_shaped.numel() == model_.arena_elements(), Error,
             "checkpoint: {} has {} elements, the parameter arena {}", name, arena_shaped.numel(),
             model_.arena_elements());
  extra_.emplace_back(std::move(name), arena_shaped);
}

bool TrainCheckpoints::restored(const std::string& name) const {
  return std::find(absent_.begin(), absent_.end(), name) == absent_.end();
}

std::optional<ResumedCheckpoint> TrainCheckpoints::resume_from(const std::vector<CheckpointBuffer>& into) {
  // Checkpoints this run would not continue from are another run's (or a later line of this
  // one): deleted only when the user says so.
  if (tc_.resume == "none" && dir_) refuse_or_discard(dir_->list(), "a fresh start (train.resume = \"none\")");
  std::optional<ResumedCheckpoint> r = resume_checkpoint(ctx_, tc_.resume, dir_.get(), into);
  if (r && dir_ && tc_.resume != "auto") {
    std::vector<std::string> later = dir_->list();
    std::erase_if(later, [&](const std::string& p) { return CheckpointDir::step_of_path(p) <= r->meta.step; });
    refuse_or_discard(later, fmt::format("continuing from step {} ({})", r->meta.step, r->path));
  }
  return r;
}

void TrainCheckpoints::refuse_or_discard(const std::vector<std::string>& others, const std::string& why) const {
  if (others.empty()) return;
  if (tc_.checkpoint.overwrite) {
    dir_->discard(others, "checkpoint.overwrite = true");
    return;
  }
  std::string names = others.front();
  if (others.size() > 1) names += fmt::format(" ... {}", others.back());
  run_collectively(ctx_, [&] {
    throw ConfigError(fmt::format(
        "checkpoint.dir: {} holds {} ({}) that {} would overwrite; to continue that run: --set train.resume=auto; "
        "to keep them: another run.dir or checkpoint.dir; to delete them: --set checkpoint.overwrite=true",
        dir_->dir(), count_of(static_cast<std::int64_t>(others.size()), "checkpoint"), names, why));
  });
}

Watchdog::Budget TrainCheckpoints::io_budget(const std::vector<CheckpointBuffer>& buffers) const {
  if (tc_.checkpoint.timeout_s > 0.0) return {tc_.checkpoint.timeout_s, "checkpoint.timeout_s"};
  double bytes = 0.0;
  for (const CheckpointBuffer& b : buffers)
    bytes += static_cast<double>(b.numel) * sizeof(float) * (b.per_rank ? ctx_.world_size() : 1);
  Watchdog::Budget budget = Watchdog::scaled_by_bytes(tc_.timeout_s, bytes, "written or read");
  budget.key = "checkpoint.timeout_s (0: " + budget.key + ")";
  return budget;
}

void TrainCheckpoints::check_same_model(const std::string& path, const std::string& checkpoint_config) const {
  // The parameters' count and each buffer's size are checked as the file is read; a model of
  // other shapes with as many parameters (two widths traded), or other heads over the same
  // weights, would take them silently. Dropout and batch norm's momentum only shape training.
  const std::vector<ConfigChange> changes =
      config_changes(checkpoint_config, path, resolved_config_, "this run's config", "model",
                     {"dropout", "p", "momentum", "init_from"});
  if (changes.empty()) return;
  std::string list;
  for (std::size_t i = 0; i < std::min<std::size_t>(changes.size(), 3); ++i)
    list += fmt::format("{}{} = {} here, {} in the checkpoint", i == 0 ? "" : "; ", changes[i].key, changes[i].after,
                        changes[i].before);
  if (changes.size() > 3) list += fmt::format(" (and {} more)", changes.size() - 3);
  throw CheckpointMismatch(
      fmt::format("train.resume: {}: written by another model ({}): its parameters do not belong to this one; resume "
                  "with the [model] it was written with (ringtrain ckpt inspect {} --config), or start a new run",
                  path, list, path));
}

void TrainCheckpoints::note_training_changes(const std::string& path, const std::string& checkpoint_config) const {
  // Continuing on other data, with a longer schedule, another learning rate or pruning target
  // may be meant, so it is said, not refused: the data position and the schedules carry over as
  // step counts (a lower sparsity target releases weights the checkpoint's mask had pruned).
  // (The seed, precision, batch and world size have their own notes or checks.)
  std::vector<ConfigChange> changes = config_changes(checkpoint_config, path, resolved_config_, "this run's config",
                                                     "data", {"prefetch", "read_ahead", "test"});
  for (const char* table : {"optim", "prune"})
    for (const ConfigChange& c :
         config_changes(checkpoint_config, path, resolved_config_, "this run's config", table, {}))
      changes.push_back(c);
  for (const ConfigChange& c :
       config_changes(checkpoint_config, path, resolved_config_, "this run's config", "train", {}))
    if (c.key == "train.epochs" || c.key == "train.max_steps") changes.push_back(c);
  if (changes.empty() || ctx_.world_rank() != 0) return;
  std::string list;
  for (const ConfigChange& c : changes)
    list += fmt::format("{}{} = {} (the checkpoint's: {})", list.empty() ? "" : ", ", c.key, c.after, c.before);
  log::warn(
      "resume: changed since the checkpoint: {}; training goes on from its step with these values (the data "
      "order, the position in the epoch and the learning-rate and pruning schedules follow them)",
      list);
}

std::optional<TrainPosition> TrainCheckpoints::resume(std::int64_t steps_per_epoch) {
  std::optional<ResumedCheckpoint> r;
  {
    const HeldForOneTransfer held{param_shard_, staged_};
    const std::vector<CheckpointBuffer> into = buffers();
    const WatchedScope watch(
        watchdog_,
        fmt::format("checkpoint resume (train.resume = {}, checkpoint.dir {})", tc_.resume, tc_.checkpoint.dir),
        io_budget(into));
    r = resume_from(into);
    if (r) {
      absent_ = r->absent;
      upload();
      unpack_params();
    }
  }
  if (!r) {
    if (tc_.resume == "auto") log::info("resume: no checkpoint in {}; starting from step 0", tc_.checkpoint.dir);
    return std::nullopt;
  }
  const CheckpointMeta& m = r->meta;
  const int world = ctx_.world_size();
  run_collectively(ctx_, [&] {
    RT_REQUIRE(m.global_batch == global_batch_, CheckpointMismatch,
               "train.resume: {}: written with a global batch of {} but this run has {} (= {} x {} per rank{}); "
               "set train.batch_size = {} to continue the same training on {}",
               r->path, m.global_batch, global_batch_, count_of(world, "rank"), tc_.batch_size,
               tc_.accumulation_steps > 1 ? fmt::format(" x {} micro-batches", tc_.accumulation_steps) : "",
               m.global_batch % (world * tc_.accumulation_steps) == 0
                   ? std::to_string(m.global_batch / (world * tc_.accumulation_steps))
                   : std::string("(none fits: the global batch is not a multiple of the rank count)"),
               count_of(world, "rank"));
    check_same_model(r->path, m.config);
  });
  optimizer_.restore_steps_taken(m.optimizer_steps);
  TrainPosition at{m.step, m.epoch, m.step_in_epoch};
  if (at.step_in_epoch >= steps_per_epoch) {  // the stream strategy's epochs may be shorter on another world size
    ++at.epoch;
    at.step_in_epoch = 0;
  }
  log::info("resume: {} at step {} (epoch {}, step {} of {} next), written by ringtrain {} on {} rank{}", r->path,
            m.step, at.epoch + 1, at.step_in_epoch + 1, steps_per_epoch, m.ringtrain_version, m.world_size,
            m.world_size == 1 ? "" : "s");
  note_training_changes(r->path, m.config);
  if (m.world_size != world) {
    log::info(
        "resume: world size changed from {} to {} ranks with the same global batch of {}: parameters and "
        "optimizer state carry over exactly{}{}",
        m.world_size, world, m.global_batch,
        model_.buffers().empty()
            ? ""
            : fmt::format("; BatchNorm's running statistics start from the mean of the writers' ranks, and its batch "
                          "statistics are now over {} samples per rank, another share of the global batch: the "
                          "losses differ from an uninterrupted run's",
                          tc_.batch_size),
        model_.has_dropout_masks() ? "; dropout masks (keyed by rank) differ from an uninterrupted run" : "");
    if (tc_.data.strategy == ReadStrategy::stream && ctx_.world_rank() == 0)
      log::warn(
          "resume: data.strategy = stream assigns samples to ranks by world size: the rest of epoch {} is "
          "re-planned for {} ranks, so some samples of it may be seen twice or not at all",
          at.epoch + 1, world);
  }
  const std::string_view precision = precision_name(tc_.precision);
  // The count of skipped steps is the run's, through any precision; the scale only fp16's.
  if (m.precision == precision && scaler_.enabled())
    scaler_.restore({m.loss_scale, m.loss_scale_good_steps, m.skipped_steps});
  else
    scaler_.restore({scaler_.scale(), scaler_.state().good_steps, m.skipped_steps});
  if (m.precision != precision) {
    log::info(
        "resume: the checkpoint was written with train.precision = \"{}\" and this run has \"{}\": the f32 "
        "master parameters and optimizer state carry over; {}",
        m.precision, precision,
        scaler_.enabled()       ? fmt::format("the loss scale starts at loss_scale.init = {:g}", scaler_.scale())
        : m.precision == "fp16" ? std::string("the fp16 loss scaler's scale is dropped (its count of skipped steps "
                                              "is kept)")
                                : std::string("nothing else changes"));
  }
  if (m.seed != tc_.seed && ctx_.world_rank() == 0)
    log::warn(
        "resume: the checkpoint was written with train.seed = {} and this run has {}: data order and "
        "augmentation from here on follow the new seed",
        m.seed, tc_.seed);
  return at;
}

void TrainCheckpoints::save(const TrainPosition& at, const std::string& why) {
  CheckpointMeta m;
  m.step = at.step;
  m.epoch = at.epoch;
  m.step_in_epoch = at.step_in_epoch;
  m.global_batch = global_batch_;
  m.seed = tc_.seed;
  m.optimizer_steps = optimizer_.steps_taken();
  m.optimizer = std::string(optimizer_.name());
  m.data_strategy = std::string(read_strategy_name(tc_.data.strategy));
  m.config = resolved_config_;
  m.precision = std::string(precision_name(tc_.precision));
  m.loss_scale = scaler_.state().scale;
  m.loss_scale_good_steps = scaler_.state().good_steps;
  m.skipped_steps = scaler_.state().skipped_steps;
  const HeldForOneTransfer held{param_shard_, staged_};
  const std::vector<CheckpointBuffer> b = buffers();
  SavedCheckpoint saved;
  const WatchedScope watch(watchdog_, fmt::format("checkpoint save of step {} into {}", at.step, dir_->dir()),
                           io_budget(b));
  pack_params();  // before download() packs the shard's parameters for the file
  {
    // The host buffers packed in place for the file get their layout back, however the save ends.
    const UnpackedOnExit unpacked{*this};
    download();
    saved = dir_->save(m, b);
  }
  log::info("checkpoint: {} ({}) at step {}: {:.1f} MB in {:.3f} s ({:.0f} MB/s)", saved.path, why, at.step,
            static_cast<double>(saved.bytes) / 1e6, saved.seconds,
            static_cast<double>(saved.bytes) / 1e6 / std::max(saved.seconds, 1e-9));
}

}  // namespace ringtrain
