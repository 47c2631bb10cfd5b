// CheckpointDir and resume_checkpoint (see header). Rank 0 does every directory operation
// (lock, probe, rename, `latest`, pruning, listing) inside run_collectively, so a failure there
// is seen by every rank at once; the file itself is written and read by all ranks together.
#include "ringtrain/ckpt/checkpoint_dir.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string_view>
#include <utility>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/files.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/test_hook.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"
#include "ringtrain/runtime/slurm.hpp"
#include "ringtrain/ckpt/dir_lock.hpp"
#include "ckpt/file_space.hpp"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;

// Step of a checkpoint file name, or -1 for any other name (also one whose step does not fit
// an int64: a stray file in a shared directory is ignored, never fatal).
std::int64_t step_of(std::string_view name) {
  constexpr std::string_view prefix = "ckpt-", suffix = ".h5";
  if (!name.starts_with(prefix) || !name.ends_with(suffix)) return -1;
  const std::string_view digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  std::int64_t step = -1;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  return error == std::errc() && end == digits.data() + digits.size() ? step : -1;
}

// Strings from rank 0 to every rank (one broadcast of the joined text).
std::vector<std::string> broadcast_lines(const Context& ctx, const std::vector<std::string>& lines) {
  std::string joined;
  for (const auto& l : lines) joined += l + '\n';
  joined = broadcast_text(ctx, joined);
  std::vector<std::string> out;
  for (std::size_t at = 0; at < joined.size();) {
    const std::size_t end = joined.find('\n', at);
    out.push_back(joined.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

void remove_quietly(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
}

// Leftovers of an interrupted save: a checkpoint's temporary file and the two files per rank
// Open MPI's "individual" shared-file-pointer component keeps beside it while it is open
// (<tmp>.data.<rank>, <tmp>.metadata.<rank>; Context), or one of `latest` or the write probe
// (write_file_atomic's name.tmp.XXXXXX).
bool is_leftover(const std::string& name) {
  if (name.ends_with(".h5.tmp")) return step_of(name.substr(0, name.size() - 4)) >= 0;
  for (const std::string_view part : {".h5.tmp.data.", ".h5.tmp.metadata."})
    if (const auto at = name.find(part); at != std::string::npos) {
      const std::string_view rank = std::string_view(name).substr(at + part.size());
      return !rank.empty() && rank.find_first_not_of("0123456789") == std::string_view::npos &&
             step_of(name.substr(0, at + 3)) >= 0;
    }
  if (name.starts_with("latest.tmp.") && name.size() == std::strlen("latest.tmp.") + 6) return true;
  return name.starts_with(".write-probe-");  // of a run that ended during its start
}

// 64 random bits, for a name no other run uses.
std::uint64_t random_token() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

// The crash-point tests' hook: RINGTRAIN_TEST_CRASH=<point>@<step> kills rank 0 (SIGKILL, as a
// node failure would) at that point of that step's save.
void crash_point(const char* point, std::int64_t step) { test_hook("RINGTRAIN_TEST_CRASH", point, step, SIGKILL); }

}  // namespace

CheckpointDir::CheckpointDir(const Context& ctx, std::string dir, std::int64_t keep)
    : ctx_(ctx), dir_(std::move(dir)), keep_(keep) {
  RT_REQUIRE(keep_ >= 1, ConfigError, "checkpoint.keep: must be >= 1, got {}", keep_);
  // The probe file proves the directory writable and, read back by every rank, shared: a
  // node-local directory (/tmp, a local scratch disk) would give each node its own checkpoints.
  std::string probe;
  run_collectively(ctx_, [&] {
    if (ctx_.world_rank() != 0) return;
    std::error_code ec;
    fs::create_directories(dir_, ec);
    RT_REQUIRE(!ec, IoError, "checkpoint.dir: {}: cannot create: {}", dir_, ec.message());
    lock_ = std::make_unique<DirLock>(dir_, "checkpoint.dir");  // before anything here is touched
    probe = fmt::format(".write-probe-{:016x}", random_token());
    try {
      write_file_atomic(dir_ + "/" + probe, probe + "\n");
    } catch (const IoError& e) {
      throw IoError(fmt::format("checkpoint.dir: {}: not writable: {}", dir_, e.what()));
    }
  });
  probe = broadcast_text(ctx_, probe);
  run_collectively(ctx_, [&] {
    std::ifstream in(dir_ + "/" + probe);
    std::string seen;
    std::getline(in, seen);
    RT_REQUIRE(seen == probe, IoError,
               "checkpoint.dir: {} on rank {} (host {}) does not hold the file rank 0 just wrote there: checkpoints "
               "need a directory every rank shares, not a node-local one",
               dir_, ctx_.world_rank(), node_name());
  });
  run_collectively(ctx_, [&] {
    if (ctx_.world_rank() != 0) return;
    remove_quietly(dir_ + "/" + probe);
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir_, ec)) {
      if (!is_leftover(entry.path().filename().string())) continue;
      log::warn("checkpoint: removing {} left by an interrupted save", entry.path().string());
      remove_quietly(entry.path().string());
    }
  });
}

CheckpointDir::~CheckpointDir() = default;

std::string CheckpointDir::file_name(std::int64_t step) { return fmt::format("ckpt-{:09}.h5", step); }

SavedCheckpoint CheckpointDir::save(const CheckpointMeta& meta, const std::vector<CheckpointBuffer>& buffers) const {
  const auto start = std::chrono::steady_clock::now();
  SavedCheckpoint saved;
  saved.path = dir_ + "/" + file_name(meta.step);
  const std::string tmp = saved.path + ".tmp";
  try {
    run_collectively(ctx_, [&] {
      if (ctx_.world_rank() == 0) ckpt::create_with_room(tmp, ckpt::file_bytes_bound(buffers, ctx_.world_size()));
    });
    write_checkpoint_file(ctx_, tmp, meta, buffers);
  } catch (const CollectiveError& e) {
    if (ctx_.world_rank() == 0) remove_quietly(tmp);
    std::string earlier;  // the directory itself may be what failed (removed, renamed): say so, after the cause
    try {
      const std::vector<std::string> older = list();
      earlier = older.empty() ? std::string("no earlier checkpoint exists") : older.front() + " is intact";
    } catch (const CollectiveError& listing) {
      earlier = listing.what();
    }
    throw CollectiveError(fmt::format("checkpoint at step {} failed: {} ({})", meta.step, e.what(), earlier));
  }
  // Every rank's data is on storage (write_checkpoint_file flushed and synced collectively);
  // only now does the file get its final name, and only after that does `latest` move.
  run_collectively(ctx_, [&] {
    if (ctx_.world_rank() != 0) return;
    crash_point("after-temp-write", meta.step);
    fsync_path(tmp, false);
    RT_REQUIRE(std::rename(tmp.c_str(), saved.path.c_str()) == 0, IoError, "checkpoint: {}: rename failed: {}", tmp,
               std::strerror(errno));
    fsync_path(dir_, true);
    crash_point("after-rename", meta.step);
    try {
      write_file_atomic(dir_ + "/latest", file_name(meta.step) + "\n");
    } catch (const IoError& e) {  // the checkpoint itself is complete: say so
      throw IoError(fmt::format("{} ({} is complete: train.resume = auto takes it, or name it in train.resume)",
                                e.what(), saved.path));
    }
    fsync_path(dir_, true);
    crash_point("after-latest", meta.step);
    saved.bytes = static_cast<std::int64_t>(fs::file_size(saved.path));
    prune(meta.step);
  });
  saved.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return saved;
}

// Of the checkpoints up to `step`, the newest `keep` stay (the one just written is the
// newest). Later steps are not this run's to delete: after resume's checks (a fresh start or
// an explicit resume refuses a directory holding them unless told to discard them) they can
// only be ones `auto` skipped as damaged; they stay for the user to look at, said once.
void CheckpointDir::prune(std::int64_t step) const {
  std::size_t kept = 0;
  for (const std::string& path : list_local()) {
    if (step_of(fs::path(path).filename().string()) > step) {
      if (reported_.insert(path).second)
        log::warn("checkpoint: leaving {}: a later step than this run's (skipped at resume), not this run's to delete",
                  path);
    } else if (++kept > static_cast<std::size_t>(keep_)) {
      std::error_code ec;  // one that cannot go (made immutable, its directory read-only) stays, said once
      if (!fs::remove(path, ec) && ec && reported_.insert(path).second)
        log::warn("checkpoint: cannot remove {} (checkpoint.keep = {}): {}; it stays, and takes its space", path, keep_,
                  ec.message());
    }
  }
}

std::vector<std::string> CheckpointDir::list_local() const {
  std::vector<std::pair<std::int64_t, std::string>> all;
  std::error_code ec;
  fs::directory_iterator it(dir_, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::int64_t step = step_of(it->path().filename().string());
    if (step >= 0) all.emplace_back(step, it->path().string());
  }
  // A listing that failed part way would pass for "no checkpoint" or an older one.
  RT_REQUIRE(!ec, IoError, "checkpoint.dir: {}: cannot list: {}", dir_, ec.message());
  std::sort(all.rbegin(), all.rend());
  std::vector<std::string> names;
  names.reserve(all.size());
  for (auto& [step, path] : all) names.push_back(std::move(path));
  return names;
}

std::vector<std::string> CheckpointDir::list() const {
  std::vector<std::string> local;
  run_collectively(ctx_, [&] {
    if (ctx_.world_rank() == 0) local = list_local();
  });
  return broadcast_lines(ctx_, local);
}

std::int64_t CheckpointDir::step_of_path(const std::string& path) {
  return step_of(fs::path(path).filename().string());
}

void CheckpointDir::discard(const std::vector<std::string>& paths, const std::string& why) const {
  run_collectively(ctx_, [&] {
    if (ctx_.world_rank() != 0) return;
    const std::string latest = dir_ + "/latest";
    std::error_code ec;
    for (const std::string& path : paths) {
      log::warn("checkpoint: removing {} ({})", path, why);
      fs::remove(path, ec);
      RT_REQUIRE(!ec, IoError, "checkpoint: {}: cannot remove: {}", path, ec.message());
    }
    // `latest` names a file that is gone: it goes too (the next save writes it again).
    std::string named;
    if (std::ifstream in(latest); in && std::getline(in, named) && !fs::exists(dir_ + "/" + named))
      fs::remove(latest, ec);
  });
}

std::optional<ResumedCheckpoint> resume_checkpoint(const Context& ctx, const std::string& resume,
                                                   const CheckpointDir* dir,
                                                   const std::vector<CheckpointBuffer>& buffers) {
  if (resume == "none") return std::nullopt;
  const bool automatic = resume == "auto";
  RT_REQUIRE(!automatic || dir != nullptr, ConfigError,
             "train.resume = \"auto\" needs checkpoints (checkpoint.enabled = false)");
  const std::vector<std::string> candidates = automatic ? dir->list() : std::vector<std::string>{resume};
  for (const std::string& path : candidates) {
    try {
      run_collectively(ctx, [&] {
        if (ctx.world_rank() != 0) return;
        RT_REQUIRE(std::filesystem::exists(path), ConfigError, "train.resume: {}: no such checkpoint", path);
        check_checkpoint_layout(path, buffers);
      });
      ResumedCheckpoint r{path, {}, {}};
      r.meta = read_checkpoint_file(ctx, path, buffers, &r.absent);
      return r;
    } catch (const CollectiveError& e) {
      if (!automatic || !e.corrupt_file()) throw;
      if (ctx.world_rank() == 0) log::warn("checkpoint: skipping a damaged checkpoint: {}", e.what());
    }
  }
  return std::nullopt;
}

}  // namespace ringtrain
