// One checkpoint file: a self-describing HDF5 file written by all ranks together (each rank
// writes a disjoint, 1 MiB-aligned slice of every replicated buffer; per-rank buffers are one
// row per rank) and read back on any number of ranks. Layout: docs/CHECKPOINT.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/arena_range.hpp"
#include "ringtrain/tensor/param_layout.hpp"

namespace ringtrain {

// A checkpoint that is intact but does not fit this run: another model (shapes), a newer
// format, another optimizer. Not a reason to fall back to an older checkpoint.
class CheckpointMismatch : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

class Context;

inline constexpr const char* kCheckpointFormat = "ringtrain-checkpoint";
// Version 2: XXH3-64 checksums and a metadata checksum. Version 1 files (ringtrain's own block
// hash, no metadata checksum) are still read.
inline constexpr std::int64_t kCheckpointFormatVersion = 2;

// Where training stands and what wrote the file (root attributes).
struct CheckpointMeta {
  std::int64_t format_version = kCheckpointFormatVersion;
  std::string ringtrain_version;
  std::string checksum_algorithm;   // how the datasets' checksums are computed (set by the writer)
  std::string rng;                  // how randomness is keyed, in words (set by the writer)
  std::uint64_t meta_checksum = 0;  // format >= 2: XXH3-64 of the other root attributes (0 in format 1)
  std::int64_t step = 0;            // optimizer steps completed
  std::int64_t epoch = 0;           // epoch of the next batch
  std::int64_t step_in_epoch = 0;   // that batch's step within its epoch
  std::int64_t global_batch = 0;    // samples per optimizer step over all ranks
  std::uint64_t seed = 0;
  std::int64_t world_size = 0;  // ranks that wrote the file
  std::int64_t optimizer_steps = 0;
  std::string optimizer;      // "sgd" | "adamw"
  std::string data_strategy;  // "memory" | "stream"
  std::string config;         // the resolved TOML of the run
  // Mixed precision (attributes absent in files of older writers: read as "fp32" and the
  // default scaler state below, which a run without loss scaling also writes).
  std::string precision = "fp32";  // train.precision: "fp32" | "bf16" | "fp16"
  double loss_scale = 1.0;         // GradScaler state after the last step
  std::int64_t loss_scale_good_steps = 0;
  std::int64_t skipped_steps = 0;  // steps skipped for fp16 overflow
  double wall_time = 0.0;          // seconds since the Unix epoch when written
};

// A float buffer the checkpoint holds, named by its dataset path ("params",
// "optimizer/velocity", "buffers"). Replicated buffers are identical on every rank (the file
// holds one copy); per-rank buffers differ by rank (the file holds one row per writer rank);
// sharded buffers are spread over the ranks (ZeRO's optimizer state): each holds `owned`
// ranges of the numel elements, packed at data, and the file holds them all as one copy, so it
// cannot tell how the writer was sharded and resumes into any sharding.
struct CheckpointBuffer {
  std::string name;
  float* data = nullptr;
  std::int64_t numel = 0;  // of the whole buffer (sharded too)
  bool per_rank = false;
  bool optional = false;  // may be absent from a file (written by a run without it): then left as it is
  // Sharded (on every rank alike): this rank holds the elements of `owned` (sorted, disjoint,
  // possibly none), packed in order at `data`; the file holds the whole buffer all the same.
  bool sharded = false;
  std::vector<ArenaRange> owned = {};
};

// What a dataset of a checkpoint holds, as found on disk (for inspection).
struct CheckpointDataset {
  std::string name;
  std::vector<std::int64_t> dims;
  std::uint64_t stored_checksum = 0;
  std::uint64_t actual_checksum = 0;  // 0 when not verified
  bool verified = false;
};

// Writes `buffers` and `meta` to `path` (created or truncated) with the MPI-IO driver and
// collective transfers; flushed and synced to storage before it returns. Collective: every
// rank passes the same names, sizes and meta (wall_time and the world size are filled in
// here, identically on every rank). IoError naming the path on failure.
void write_checkpoint_file(const Context& ctx, const std::string& path, CheckpointMeta meta,
                           const std::vector<CheckpointBuffer>& buffers);

// Reads the metadata (its checksum verified) and dataset list on this process alone (POSIX
// driver, no MPI) and, with `verify`, every dataset's checksum. Throws CorruptFileError for a
// file that is not HDF5, truncated, lacks the format attributes or has a wrong checksum, and
// CheckpointMismatch for a format version newer than this build reads.
CheckpointMeta inspect_checkpoint_file(const std::string& path, bool verify, std::vector<CheckpointDataset>* datasets);

// Checks that `path` holds exactly the buffers expected (names and sizes; per-rank buffers
// may have any number of rows; optional ones may be absent): CheckpointMismatch naming the
// dataset and both shapes.
// Local, no MPI; rank 0 runs it before the collective read.
void check_checkpoint_layout(const std::string& path, const std::vector<CheckpointBuffer>& expected);

// Reads every buffer back into `buffers` (sizes as checked above) on any number of ranks:
// each rank reads its slice of a replicated buffer collectively and the slices are
// all-gathered; checksums are verified on the assembled data (CorruptFileError on a
// mismatch, on every rank alike). Per-rank buffers: a rank of the same world size gets its
// own row; on another world size every rank gets the mean of all rows. Optional buffers the
// file lacks are left as they are and named in `absent` (when given). Collective.
CheckpointMeta read_checkpoint_file(const Context& ctx, const std::string& path,
                                    const std::vector<CheckpointBuffer>& buffers,
                                    std::vector<std::string>* absent = nullptr);

// Reads dataset "params" (a model's logical parameters: its tensors packed, no pads) of `path`
// into a parameter arena laid out by `layout` (its pads zero). Collective, as above.
void read_checkpoint_params(const Context& ctx, const std::string& path, const ParamLayout& layout, float* arena);

// The checksum of a byte range as this build stores it: XXH3-64 of the big-endian XXH3-64
// digests of its 1 MiB blocks (so ranks can hash their own aligned slices in parallel).
std::uint64_t checkpoint_checksum(const void* data, std::int64_t bytes);

}  // namespace ringtrain
