// Private: the trainer's side of checkpoints: which buffers a run saves (parameters,
// optimizer state, per-rank BatchNorm statistics, the loss scaler's state), the training
// position they record, resuming with the checks a changed world size or precision needs,
// and saving with a log line.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ringtrain/ckpt/checkpoint_dir.hpp"
#include "ringtrain/comm/watchdog.hpp"
#include "ringtrain/tensor/param_layout.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

class Context;
class GradScaler;
class Model;
class Optimizer;
struct TrainConfig;

// Where the next batch comes from, and how many optimizer steps are done.
struct TrainPosition {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t step_in_epoch = 0;
};

class TrainCheckpoints {
 public:
  // Collective: with checkpoints enabled, opens (creates, locks, probes) checkpoint.dir.
  // A save or resume that has not finished within checkpoint.timeout_s (by default
  // comm.timeout_s + 1 s per 20 MB: a file system that stopped answering, MPI-IO ranks left in
  // different states by a failure) ends the job through the watchdog.
  TrainCheckpoints(const Context& ctx, const TrainConfig& tc, Model& model, Optimizer& optimizer, GradScaler& scaler,
                   std::string resolved_config, std::int64_t global_batch, Watchdog& watchdog);

  bool enabled() const { return dir_ != nullptr; }

  // Also saves and restores `arena_shaped` (a host tensor of the model's arena elements,
  // identical on every rank; the file holds its logical elements) as dataset `name`, e.g. the
  // pruning mask. Call before resume(). A checkpoint written without it (by a run without
  // pruning) leaves it as it is: see restored().
  void add_replicated(std::string name, const Tensor& arena_shaped);
  // After resume(): whether the checkpoint held add_replicated()'s dataset `name`.
  bool restored(const std::string& name) const;

  // Loads what train.resume names into the model, optimizer and loss scaler (collective) and returns the
  // position to continue from; nullopt for a fresh start. CollectiveError when the checkpoint
  // cannot continue this run (another global batch, another model).
  std::optional<TrainPosition> resume(std::int64_t steps_per_epoch);

  // Writes a checkpoint of the current state at `at` (collective) and logs it.
  void save(const TrainPosition& at, const std::string& why);

  // A buffer the file reads and writes other than as its tensor is: a device tensor's host
  // copy, and/or packed to the logical parameters (in place: a host tensor is packed for the
  // transfer and unpacked after it, so a save takes no memory for the packing).
  struct Staged {
    std::string name;  // the dataset's
    Tensor source;     // the tensor the run uses
    Tensor host;       // a device source's host copy; empty for a host source
    std::optional<ParamLayout::Packing> packing;
    bool host_packed = false;  // a host source, packed in place until unpack_host_sources()
    float* file_data() const { return host.raw() != nullptr ? host.f32() : source.f32(); }
  };
  // After a save (also one that failed): the host sources download() packed in place get their
  // arena layout back.
  void unpack_host_sources() const;

 private:
  std::vector<CheckpointBuffer> buffers() const;  // collective
  // The checks of what train.resume and checkpoint.dir hold, then the read (collective).
  std::optional<ResumedCheckpoint> resume_from(const std::vector<CheckpointBuffer>& into);
  // How long a save or resume of `buffers` may take before the watchdog ends the job.
  Watchdog::Budget io_budget(const std::vector<CheckpointBuffer>& buffers) const;
  // `others` (checkpoints in dir_ this run would not continue from) are deleted with
  // checkpoint.overwrite, else a CollectiveError names them, `why`, and the ways on.
  void refuse_or_discard(const std::vector<std::string>& others, const std::string& why) const;
  // CheckpointMismatch when the checkpoint's resolved [model] (in its config) differs from this
  // run's in a key that changes what the parameters mean.
  void check_same_model(const std::string& path, const std::string& checkpoint_config) const;
  // Rank 0 warns of the data, optimizer, pruning and schedule keys (data.*, optim.*, prune.*,
  // train.epochs and train.max_steps) whose values differ from the checkpoint's.
  void note_training_changes(const std::string& path, const std::string& checkpoint_config) const;
  // Where the checkpoint reads and writes tensor t (packed by `packing` when given): t's own data
  // on the host (packed in place by download(), unpacked by upload() or after the save), or a
  // device tensor's host copy; staged_ holds what download() and upload() (unless the resumed
  // file lacked dataset `name`) do, for one transfer.
  float* staged(const std::string& name, const Tensor& t, std::optional<ParamLayout::Packing> packing) const;
  // The buffer `name` of an arena-shaped tensor t: the whole arena, or (shard not null) a ZeRO
  // shard holding the arena elements of *shard. The file holds the logical parameters (no pads).
  CheckpointBuffer arena_buffer(const std::string& name, const Tensor& t, const std::vector<ArenaRange>* shard,
                                bool optional) const;
  void download() const;
  void upload() const;
  // ZeRO stage 3 keeps only its shard of the parameters: saved from and resumed into a packed
  // copy of it (the file holds the whole tensor all the same), held for one save or resume.
  bool sharded_params() const;
  void pack_params() const;
  void unpack_params();

  const Context& ctx_;
  const TrainConfig& tc_;
  Model& model_;
  Optimizer& optimizer_;
  GradScaler& scaler_;
  std::string resolved_config_;
  std::unique_ptr<CheckpointDir> dir_;
  std::int64_t global_batch_ = 0;
  Watchdog& watchdog_;
  std::vector<std::pair<std::string, Tensor>> extra_;  // add_replicated()
  std::vector<std::string> absent_;                    // of extra_, the ones the resumed checkpoint lacked
  mutable std::vector<Staged> staged_;
  mutable Tensor param_shard_;  // stage 3, during a save or resume: this rank's parameter shard, packed
};

}  // namespace ringtrain
