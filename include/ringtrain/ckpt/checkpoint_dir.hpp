// CheckpointDir: the checkpoints of a run in one directory, which the run holds locked. Saves
// are atomic (written as ckpt-<step>.h5.tmp, synced, renamed by rank 0 after every rank
// finished, then `latest` is updated and all but the newest `keep` files up to that step are
// removed), so a crash at any moment leaves the previous checkpoint usable. Resume picks the
// newest intact one.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ringtrain/ckpt/checkpoint.hpp"

namespace ringtrain {

class Context;
class DirLock;

struct SavedCheckpoint {
  std::string path;
  std::int64_t bytes = 0;
  double seconds = 0.0;  // write, sync and publish, as rank 0 saw it
};

struct ResumedCheckpoint {
  std::string path;
  CheckpointMeta meta;
  std::vector<std::string> absent;  // optional buffers the file did not hold (left as they were)
};

class CheckpointDir {
 public:
  // Collective: rank 0 creates `dir`, locks it for as long as this object lives (a second
  // run on it gets a CollectiveError naming the holder), proves it writable and shared by every
  // rank with a probe file that every rank reads back (a node-local directory is an error),
  // and removes leftovers of interrupted saves (*.h5.tmp, latest.tmp.*). CollectiveError
  // naming the directory otherwise, so an unwritable directory fails the run at start rather
  // than at its first save.
  CheckpointDir(const Context& ctx, std::string dir, std::int64_t keep);
  ~CheckpointDir();

  const std::string& dir() const { return dir_; }
  static std::string file_name(std::int64_t step);  // "ckpt-000001200.h5"

  // Collective. Rank 0 first allocates the file's expected size (a full disk or quota is
  // reported before any data moves). On failure the temporary file is removed, the previous
  // checkpoint stays as it was, and every rank throws the same CollectiveError. Checkpoints
  // of later steps than this one are left in place (with a warning, once).
  SavedCheckpoint save(const CheckpointMeta& meta, const std::vector<CheckpointBuffer>& buffers) const;

  // Checkpoints here, newest (highest step) first, as rank 0 lists them. Collective; a
  // listing that fails is a CollectiveError, never an empty list.
  std::vector<std::string> list() const;
  // The step in a checkpoint's file name (-1: not a checkpoint name).
  static std::int64_t step_of_path(const std::string& path);

  // Collective: rank 0 deletes these checkpoints, each with a warning giving `why`, and
  // `latest` when it named one of them.
  void discard(const std::vector<std::string>& paths, const std::string& why) const;

 private:
  std::vector<std::string> list_local() const;  // rank 0's view, newest first
  void prune(std::int64_t step) const;          // rank 0, after the save of `step`

  const Context& ctx_;
  std::string dir_;
  std::int64_t keep_;
  std::unique_ptr<DirLock> lock_;           // rank 0
  mutable std::set<std::string> reported_;  // files already warned about (later steps; ones pruning cannot remove)
};

// Loads a checkpoint into `buffers` (collective). `resume` is "none" (nothing: returns
// nullopt), "auto" (the newest intact checkpoint in `dir`, skipping damaged ones with a
// warning naming each; nullopt when there is none) or a file path (that file, or an error).
// A checkpoint that does not fit the run (CheckpointMismatch) is an error in every mode.
std::optional<ResumedCheckpoint> resume_checkpoint(const Context& ctx, const std::string& resume,
                                                   const CheckpointDir* dir,
                                                   const std::vector<CheckpointBuffer>& buffers);

}  // namespace ringtrain
