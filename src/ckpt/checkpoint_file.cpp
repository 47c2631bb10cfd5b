// Checkpoint files (see header and docs/CHECKPOINT.md). Every collective HDF5 step runs inside
// run_collectively: a step that fails on one rank (a full disk seen by one aggregator) then
// fails on all of them together, and no rank is left waiting in the next collective call.
// Files of format version 1 are read with that version's checksums (ckpt::checksum_scheme).
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fmt/ranges.h>
#include <string_view>

#include "ckpt/checksum.hpp"
#include "ckpt/file_space.hpp"
#include "ckpt/shard_exchange.hpp"
#include "hdf5/h5_attributes.hpp"
#include "hdf5/h5_file_problem.hpp"
#include "check/mpi_check.hpp"
#include "ringtrain/ckpt/checkpoint.hpp"
#include "ringtrain/core/bytes.hpp"
#include "ringtrain/core/files.hpp"
#include "ringtrain/core/printable.hpp"
#include "ringtrain/core/version.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "runtime/mpi_context.hpp"

namespace ringtrain {
namespace {

constexpr std::int64_t kFloatBytes = sizeof(float);
constexpr std::int64_t kBlockFloats = ckpt::kChecksumBlockBytes / kFloatBytes;
// One H5Dread/H5Dwrite moves at most this much per rank (MPI-IO counts are 32-bit ints).
constexpr std::int64_t kMaxTransferFloats = (std::int64_t{256} << 20) / kFloatBytes;
constexpr ckpt::ChecksumScheme kWrittenScheme = ckpt::ChecksumScheme::kXxh3;
constexpr const char* kRngDescription =
    "counter-based: every draw is keyed by (seed, epoch or step, global sample index); no rank holds RNG state "
    "beyond seed and step";

// This rank's part of a replicated buffer: whole checksum blocks, split evenly by blocks.
struct Slice {
  std::int64_t begin = 0, end = 0;  // elements
  std::int64_t first_block = 0, blocks = 0;
};

Slice slice_of(std::int64_t numel, int rank, int world) {
  const std::int64_t total_blocks = (numel + kBlockFloats - 1) / kBlockFloats;
  Slice s;
  s.first_block = total_blocks * rank / world;
  const std::int64_t end_block = total_blocks * (rank + 1) / world;
  s.blocks = end_block - s.first_block;
  s.begin = std::min(numel, s.first_block * kBlockFloats);
  s.end = std::min(numel, end_block * kBlockFloats);
  return s;
}

// Calls every rank must make for the largest slice of a buffer of numel elements.
std::int64_t transfer_rounds(std::int64_t numel, int world) {
  std::int64_t largest = 0;
  for (int r = 0; r < world; ++r) {
    const Slice s = slice_of(numel, r, world);
    largest = std::max(largest, s.end - s.begin);
  }
  return std::max<std::int64_t>(1, (largest + kMaxTransferFloats - 1) / kMaxTransferFloats);
}

// Moves `count` floats between `data` and the file, starting at `start` and running along the
// last dimension, in exactly `rounds` calls (collective transfers need the same number of
// calls on every rank; a rank with nothing left selects nothing).
void transfer(hid_t dset, const std::vector<hsize_t>& file_dims, std::vector<hsize_t> start, std::int64_t count,
              std::int64_t rounds, hid_t dxpl, float* data, bool write) {
  h5::Dataspace file_space(
      RT_H5_CHECK(H5Screate_simple(static_cast<int>(file_dims.size()), file_dims.data(), nullptr)));
  for (std::int64_t round = 0, done = 0; round < rounds; ++round) {
    const std::int64_t n = std::min(kMaxTransferFloats, count - done);
    const hsize_t mem_n = static_cast<hsize_t>(std::max<std::int64_t>(n, 1));
    h5::Dataspace mem_space(RT_H5_CHECK(H5Screate_simple(1, &mem_n, nullptr)));
    if (n > 0) {
      std::vector<hsize_t> counts(file_dims.size(), 1);
      counts.back() = static_cast<hsize_t>(n);
      RT_H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, counts.data(), nullptr));
      start.back() += static_cast<hsize_t>(n);
    } else {
      RT_H5_CHECK(H5Sselect_none(file_space));
      RT_H5_CHECK(H5Sselect_none(mem_space));
    }
    float* at = data + done;
    if (write)
      RT_H5_CHECK(H5Dwrite(dset, H5T_NATIVE_FLOAT, mem_space, file_space, dxpl, at));
    else
      RT_H5_CHECK(H5Dread(dset, H5T_NATIVE_FLOAT, mem_space, file_space, dxpl, at));
    done += std::max<std::int64_t>(n, 0);
  }
}

// The block hashes of every rank's slice, gathered in order on every rank, combined.
std::uint64_t gathered_checksum(MPI_Comm comm, int world, std::int64_t numel, const Slice& mine, const float* slice,
                                ckpt::ChecksumScheme scheme) {
  std::vector<std::uint64_t> local(static_cast<std::size_t>(mine.blocks));
  ckpt::hash_blocks(scheme, slice, (mine.end - mine.begin) * kFloatBytes, local.data());
  std::vector<int> counts(static_cast<std::size_t>(world)), displs(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    const Slice s = slice_of(numel, r, world);
    counts[static_cast<std::size_t>(r)] = static_cast<int>(s.blocks);
    displs[static_cast<std::size_t>(r)] = static_cast<int>(s.first_block);
  }
  std::vector<std::uint64_t> all(static_cast<std::size_t>((numel + kBlockFloats - 1) / kBlockFloats));
  RT_MPI_CHECK(MPI_Allgatherv(local.data(), static_cast<int>(local.size()), MPI_UINT64_T, all.data(), counts.data(),
                              displs.data(), MPI_UINT64_T, comm));
  return ckpt::combine_block_hashes(scheme, all.data(), static_cast<std::int64_t>(all.size()));
}

// Fills the rest of `data` (numel elements) from the ranks that hold the other slices.
void allgather_slices(MPI_Comm comm, int world, std::int64_t numel, float* data) {
  std::vector<int> counts(static_cast<std::size_t>(world)), displs(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    const Slice s = slice_of(numel, r, world);
    counts[static_cast<std::size_t>(r)] = static_cast<int>(s.end - s.begin);
    displs[static_cast<std::size_t>(r)] = static_cast<int>(s.begin);
  }
  RT_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(), displs.data(), MPI_FLOAT, comm));
}

h5::PropList mpio_file_access(MPI_Comm comm) {
  h5::PropList fapl(RT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  RT_H5_CHECK(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
  // Metadata is read and written by one rank and shared, not by every rank at once.
  RT_H5_CHECK(H5Pset_all_coll_metadata_ops(fapl, true));
  RT_H5_CHECK(H5Pset_coll_metadata_write(fapl, true));
  // Large datasets start on 1 MiB boundaries (file-system stripes and pages).
  RT_H5_CHECK(H5Pset_alignment(fapl, std::uint64_t{1} << 20, std::uint64_t{1} << 20));
  return fapl;
}

// Collective H5Dwrite/H5Dread calls (every rank takes part in each) carried out as each rank's
// own MPI-IO transfer of its slice. The slices are large and contiguous, so two-phase
// collective buffering has nothing to merge, and Open MPI's collective writer hangs when one
// aggregator hits a full disk while the others go on; with individual I/O the failing rank
// returns the error and the agreement that follows every step ends all ranks together.
h5::PropList collective_transfer() {
  h5::PropList dxpl(RT_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
  RT_H5_CHECK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
  RT_H5_CHECK(H5Pset_dxpl_mpio_collective_opt(dxpl, H5FD_MPIO_INDIVIDUAL_IO));
  return dxpl;
}

// The bytes the metadata checksum covers: every root attribute but meta_checksum, in the order
// written below, each as its name, a NUL byte and its value (integers and float64 as 8 bytes
// little-endian; strings as their byte length, 8 bytes little-endian, then their UTF-8 bytes).
// The same on every machine; spelled out in docs/CHECKPOINT.md.
class MetaBytes {
 public:
  MetaBytes& add(std::string_view name, std::uint64_t value) {
    bytes_.append(name).push_back('\0');
    word(value);
    return *this;
  }
  MetaBytes& add(std::string_view name, std::int64_t value) { return add(name, static_cast<std::uint64_t>(value)); }
  MetaBytes& add(std::string_view name, double value) { return add(name, std::bit_cast<std::uint64_t>(value)); }
  MetaBytes& add(std::string_view name, std::string_view value) {
    bytes_.append(name).push_back('\0');
    word(value.size());
    bytes_.append(value);
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  void word(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string bytes_;
};

std::uint64_t meta_checksum(const CheckpointMeta& m) {
  MetaBytes b;
  b.add("format", std::string_view(kCheckpointFormat))
      .add("format_version", m.format_version)
      .add("ringtrain_version", m.ringtrain_version)
      .add("step", m.step)
      .add("epoch", m.epoch)
      .add("step_in_epoch", m.step_in_epoch)
      .add("global_batch", m.global_batch)
      .add("seed", m.seed)
      .add("world_size", m.world_size)
      .add("optimizer_steps", m.optimizer_steps)
      .add("optimizer", m.optimizer)
      .add("data_strategy", m.data_strategy)
      .add("rng", m.rng)
      .add("checksum_algorithm", m.checksum_algorithm)
      .add("config", m.config)
      .add("precision", m.precision)
      .add("loss_scale", m.loss_scale)
      .add("loss_scale_good_steps", m.loss_scale_good_steps)
      .add("skipped_steps", m.skipped_steps)
      .add("wall_time", m.wall_time);
  return ckpt::xxh3_64(b.bytes().data(), b.bytes().size());
}

void write_meta(hid_t file, const CheckpointMeta& m) {
  h5::write_string_attr(file, "format", {kCheckpointFormat}, true);
  h5::write_attr<std::int64_t>(file, "format_version", m.format_version);
  h5::write_string_attr(file, "ringtrain_version", {m.ringtrain_version}, true);
  h5::write_attr<std::int64_t>(file, "step", m.step);
  h5::write_attr<std::int64_t>(file, "epoch", m.epoch);
  h5::write_attr<std::int64_t>(file, "step_in_epoch", m.step_in_epoch);
  h5::write_attr<std::int64_t>(file, "global_batch", m.global_batch);
  h5::write_attr<std::uint64_t>(file, "seed", m.seed);
  h5::write_attr<std::int64_t>(file, "world_size", m.world_size);
  h5::write_attr<std::int64_t>(file, "optimizer_steps", m.optimizer_steps);
  h5::write_string_attr(file, "optimizer", {m.optimizer}, true);
  h5::write_string_attr(file, "data_strategy", {m.data_strategy}, true);
  h5::write_string_attr(file, "rng", {m.rng}, true);
  h5::write_string_attr(file, "checksum_algorithm", {m.checksum_algorithm}, true);
  h5::write_string_attr(file, "config", {m.config}, true);
  h5::write_string_attr(file, "precision", {m.precision}, true);
  h5::write_attr<double>(file, "loss_scale", m.loss_scale);
  h5::write_attr<std::int64_t>(file, "loss_scale_good_steps", m.loss_scale_good_steps);
  h5::write_attr<std::int64_t>(file, "skipped_steps", m.skipped_steps);
  h5::write_attr<double>(file, "wall_time", m.wall_time);
  h5::write_attr<std::uint64_t>(file, "meta_checksum", m.meta_checksum);
}

// Values a damaged or crafted file can hold but no writer writes; resuming from them would
// index the sampler before its first batch, divide by a zero batch or scale by a NaN.
void check_meta_ranges(const CheckpointMeta& m) {
  auto at_least = [](const char* name, std::int64_t value, std::int64_t least) {
    RT_REQUIRE(value >= least, DataError, "attribute '{}' is {}, expected >= {}", name, value, least);
  };
  at_least("step", m.step, 0);
  at_least("epoch", m.epoch, 0);
  at_least("step_in_epoch", m.step_in_epoch, 0);
  at_least("global_batch", m.global_batch, 1);
  at_least("world_size", m.world_size, 1);
  at_least("optimizer_steps", m.optimizer_steps, 0);
  at_least("loss_scale_good_steps", m.loss_scale_good_steps, 0);
  at_least("skipped_steps", m.skipped_steps, 0);
  RT_REQUIRE(m.skipped_steps <= m.step, DataError, "attribute 'skipped_steps' is {}, more than the {} steps taken",
             m.skipped_steps, m.step);
  RT_REQUIRE(std::isfinite(m.loss_scale) && m.loss_scale > 0.0, DataError,
             "attribute 'loss_scale' is {}, expected a finite value > 0", m.loss_scale);
}

// The root attributes. A file that is not a checkpoint, or whose metadata is malformed, out of
// range or (format >= 2) does not match its meta_checksum, is a CorruptFileError naming the
// path and the attribute; a newer format is a CheckpointMismatch. Ranges are checked before the
// checksum, so a damaged value is named when it is out of range.
CheckpointMeta read_meta(hid_t file, const std::string& path) {
  CheckpointMeta m;
  try {
    RT_REQUIRE(RT_H5_CHECK(H5Aexists(file, "format")) > 0, CorruptFileError,
               "{}: not a ringtrain checkpoint (no 'format' attribute)", path);
    const std::string format = h5::read_name_attr(file, "format");
    RT_REQUIRE(format == kCheckpointFormat, CorruptFileError, "{}: not a ringtrain checkpoint (format '{}')", path,
               format);
    m.format_version = h5::read_attr<std::int64_t>(file, "format_version");
    RT_REQUIRE(m.format_version >= 1, DataError, "attribute 'format_version' is {}, expected >= 1", m.format_version);
    if (m.format_version > kCheckpointFormatVersion)
      throw CheckpointMismatch(
          fmt::format("{}: checkpoint format version {} is not readable by ringtrain {} (reads "
                      "version {}); resume with the ringtrain that wrote it",
                      path, m.format_version, version(), kCheckpointFormatVersion));
    const ckpt::ChecksumScheme scheme = ckpt::checksum_scheme(m.format_version);
    m.ringtrain_version = h5::read_name_attr(file, "ringtrain_version");
    m.step = h5::read_attr<std::int64_t>(file, "step");
    m.epoch = h5::read_attr<std::int64_t>(file, "epoch");
    m.step_in_epoch = h5::read_attr<std::int64_t>(file, "step_in_epoch");
    m.global_batch = h5::read_attr<std::int64_t>(file, "global_batch");
    m.seed = h5::read_attr<std::uint64_t>(file, "seed");
    m.world_size = h5::read_attr<std::int64_t>(file, "world_size");
    m.optimizer_steps = h5::read_attr<std::int64_t>(file, "optimizer_steps");
    m.optimizer = h5::read_name_attr(file, "optimizer");
    m.data_strategy = h5::read_name_attr(file, "data_strategy");
    m.rng = h5::read_name_attr(file, "rng");
    m.checksum_algorithm = h5::read_name_attr(file, "checksum_algorithm");
    m.config = h5::read_string_attr(file, "config");
    m.wall_time = h5::read_attr<double>(file, "wall_time");
    // Format 1 writers before mixed precision lacked these four; every format 2 file has them.
    if (m.format_version >= 2 || RT_H5_CHECK(H5Aexists(file, "precision")) > 0) {
      m.precision = h5::read_name_attr(file, "precision");
      m.loss_scale = h5::read_attr<double>(file, "loss_scale");
      m.loss_scale_good_steps = h5::read_attr<std::int64_t>(file, "loss_scale_good_steps");
      m.skipped_steps = h5::read_attr<std::int64_t>(file, "skipped_steps");
    }
    RT_REQUIRE(m.checksum_algorithm == ckpt::checksum_algorithm(scheme), DataError,
               "attribute 'checksum_algorithm' is '{}', but format version {} uses '{}'", m.checksum_algorithm,
               m.format_version, ckpt::checksum_algorithm(scheme));
    check_meta_ranges(m);
    if (m.format_version >= 2) {
      m.meta_checksum = h5::read_attr<std::uint64_t>(file, "meta_checksum");
      RT_REQUIRE(m.meta_checksum == meta_checksum(m), DataError,
                 "attribute 'meta_checksum' does not match the other root attributes (one was changed after the "
                 "write)");
    }
  } catch (const DataError& e) {
    throw CorruptFileError(fmt::format("{}: damaged checkpoint metadata: {}", path, e.what()));
  }
  return m;
}

// A dataset's stored checksum; a malformed attribute means the file is damaged.
std::uint64_t stored_checksum(hid_t dset, const std::string& path, const std::string& name) {
  try {
    return h5::read_attr<std::uint64_t>(dset, "checksum");
  } catch (const DataError& e) {
    throw CorruptFileError(fmt::format("{}: dataset '{}': {}", path, name, e.what()));
  }
}

// Names of every dataset in the file, in HDF5's visiting order (alphabetical).
std::vector<std::string> dataset_names(hid_t file) {
  std::vector<std::string> names;
  auto visit = [](hid_t, const char* name, const H5O_info_t* info, void* out) -> herr_t {
    if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(out)->emplace_back(name);
    return 0;
  };
  RT_H5_CHECK(H5Ovisit(file, H5_INDEX_NAME, H5_ITER_INC, visit, &names));
  return names;
}

// A dataset's shape. Its floats sized allocations and reads, so a shape whose bytes overflow or
// exceed the whole file (crafted, or never written) is a CorruptFileError, not an allocation.
std::vector<std::int64_t> dims_of(hid_t dset, const std::string& path, const std::string& name) {
  h5::Dataspace space(RT_H5_CHECK(H5Dget_space(dset)));
  const int rank = RT_H5_CHECK(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> d(static_cast<std::size_t>(rank));
  RT_H5_CHECK(H5Sget_simple_extent_dims(space, d.data(), nullptr));
  const h5::File file(RT_H5_CHECK(H5Iget_file_id(dset)));
  hsize_t file_bytes = 0;
  RT_H5_CHECK(H5Fget_filesize(file, &file_bytes));
  std::uint64_t bytes = kFloatBytes;
  bool overflow = false;
  for (const hsize_t x : d) overflow |= x > INT64_MAX || __builtin_mul_overflow(bytes, x, &bytes);
  RT_REQUIRE(!overflow && bytes <= file_bytes, CorruptFileError,
             "{}: dataset '{}' has shape [{}], more floats than the whole file ({}) holds", path, name,
             fmt::join(d, ", "), format_bytes(static_cast<double>(file_bytes)));
  return std::vector<std::int64_t>(d.begin(), d.end());
}

std::string shape_str(const std::vector<std::int64_t>& d) { return fmt::format("[{}]", fmt::join(d, ", ")); }

// The shape of buffer b's dataset, which must be what b needs: floats as written (a 32-bit
// IEEE type; HDF5 would otherwise convert whatever the file holds), [numel] or, per rank,
// [ranks >= 1, numel]. CorruptFileError for another type, CheckpointMismatch for another shape.
std::vector<std::int64_t> checked_dims(hid_t dset, const std::string& path, const CheckpointBuffer& b) {
  h5::Datatype type(RT_H5_CHECK(H5Dget_type(dset)));
  RT_REQUIRE(RT_H5_CHECK(H5Tget_class(type)) == H5T_FLOAT && H5Tget_size(type) == sizeof(float), CorruptFileError,
             "{}: dataset '{}' does not hold 32-bit floats, as every checkpoint writer writes them", path, b.name);
  std::vector<std::int64_t> dims = dims_of(dset, path, b.name);
  const bool fits =
      b.per_rank ? (dims.size() == 2 && dims[0] >= 1 && dims[1] == b.numel) : (dims.size() == 1 && dims[0] == b.numel);
  if (!fits)
    throw CheckpointMismatch(fmt::format(
        "{}: dataset '{}' has shape {} but this run needs {}: written by another "
        "model?",
        path, b.name, shape_str(dims), b.per_rank ? fmt::format("[ranks, {}]", b.numel) : shape_str({b.numel})));
  return dims;
}

// A file that is there but cannot be read (its permissions, an I/O error) is not a damaged
// checkpoint: IoError, which `auto` resume stops at instead of skipping the file for an older one
// (whose run then saved over it: the newer checkpoint was lost).
void require_readable(const std::string& path) {
  const FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.valid() || errno == ENOENT) return;  // a missing file is said by the checks that follow
  throw IoError(
      fmt::format("{}: cannot read: {} (not a damaged checkpoint: make it readable, or move it away to "
                  "resume from an earlier one)",
                  path, std::strerror(errno)));
}

// A POSIX-driver handle on a checkpoint: CorruptFileError when HDF5 cannot open it (not HDF5,
// truncated), IoError when it cannot be read at all.
h5::File open_local(const std::string& path) {
  require_readable(path);
  if (const std::string problem = h5::local_file_problem(path); !problem.empty())
    throw CorruptFileError(fmt::format("cannot open as a checkpoint: {}", problem));
  try {
    return h5::File(h5::open_read_only_file(path, H5P_DEFAULT));
  } catch (const DataError& e) {
    throw CorruptFileError(fmt::format("cannot open as a checkpoint: {}", e.what()));
  }
}

// Runs fn; an HDF5 failure while reading a file we wrote means the file is damaged.
template <typename F>
void as_corrupt(F&& fn) {
  try {
    fn();
  } catch (const DataError& e) {
    throw CorruptFileError(e.what());
  }
}

double unix_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void check_layout(const std::string& path, const std::vector<CheckpointBuffer>& expected) {
  h5::File file = open_local(path);
  const CheckpointMeta meta = read_meta(file, path);
  // An optimizer's state that is missing or extra: the optimizer the file was written with; a
  // pruning mask: the run's [prune] keys.
  const auto why = [&](const std::string& dataset) {
    if (dataset.starts_with("optimizer/"))
      return fmt::format("written with optim.name = '{}'; resume with that optimizer, or start a new run",
                         printable(meta.optimizer));
    if (dataset.starts_with("prune/"))
      return std::string(
          "written by a pruning run; resume with its [prune] keys (ringtrain ckpt inspect --config shows them)");
    return std::string("written by another model?");
  };
  const std::vector<std::string> found = dataset_names(file);
  for (const CheckpointBuffer& b : expected) {
    const bool present = std::find(found.begin(), found.end(), b.name) != found.end();
    if (!present && b.optional) continue;
    if (!present)
      throw CheckpointMismatch(fmt::format("{}: dataset '{}' is missing (found: {}): {}", path, b.name,
                                           printable(fmt::format("{}", fmt::join(found, ", "))), why(b.name)));
    h5::Dataset dset(RT_H5_CHECK(H5Dopen2(file, b.name.c_str(), H5P_DEFAULT)));
    checked_dims(dset, path, b);
  }
  for (const std::string& name : found) {
    const bool used = std::any_of(expected.begin(), expected.end(), [&](const auto& b) { return b.name == name; });
    if (!used)
      throw CheckpointMismatch(
          fmt::format("{}: dataset '{}' has no place in this run: {}", path, printable(name), why(name)));
  }
}

}  // namespace

void write_checkpoint_file(const Context& ctx, const std::string& path, CheckpointMeta meta,
                           const std::vector<CheckpointBuffer>& buffers) {
  const MPI_Comm comm = world_comm(ctx);
  const int world = ctx.world_size();
  const int rank = ctx.world_rank();
  const auto lock = h5::lock();
  const h5::ErrorContext where(path);
  meta.world_size = world;
  meta.ringtrain_version = version();
  meta.format_version = kCheckpointFormatVersion;
  meta.checksum_algorithm = ckpt::checksum_algorithm(kWrittenScheme);
  meta.rng = kRngDescription;
  meta.wall_time = unix_time_now();
  RT_MPI_CHECK(MPI_Bcast(&meta.wall_time, 1, MPI_DOUBLE, 0, comm));  // attributes must match on every rank
  meta.meta_checksum = meta_checksum(meta);

  h5::File file;
  run_collectively(ctx, [&] {
    h5::PropList fapl = mpio_file_access(comm);
    file = h5::File(RT_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl)));
  });
  // Creating truncated the file: room for all of it is taken (again) before anything is written,
  // agreed on its own so that a full disk leaves every rank with the same HDF5 state to close.
  run_collectively(ctx, [&] {
    if (rank == 0) ckpt::hold_room(path, ckpt::file_bytes_bound(buffers, world));
  });
  run_collectively(ctx, [&] { write_meta(file, meta); });
  h5::PropList dxpl = collective_transfer();
  h5::PropList lcpl(RT_H5_CHECK(H5Pcreate(H5P_LINK_CREATE)));
  RT_H5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
  h5::PropList dcpl(RT_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  RT_H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));  // every byte is written right away
  for (const CheckpointBuffer& b : buffers) {
    std::vector<hsize_t> dims;
    std::uint64_t checksum = 0;
    std::vector<float> rows;   // per-rank buffers: every rank's row, for the checksum
    std::vector<float> owned;  // sharded buffers: this rank's slice, gathered from its owners
    float* slice = nullptr;    // replicated and sharded buffers: the values of this rank's slice
    if (b.per_rank) {
      dims = {static_cast<hsize_t>(world), static_cast<hsize_t>(b.numel)};
      rows.resize(static_cast<std::size_t>(world * b.numel));
      RT_MPI_CHECK(MPI_Allgather(b.data, static_cast<int>(b.numel), MPI_FLOAT, rows.data(), static_cast<int>(b.numel),
                                 MPI_FLOAT, comm));
      checksum =
          ckpt::buffer_checksum(kWrittenScheme, rows.data(), static_cast<std::int64_t>(rows.size()) * kFloatBytes);
    } else {
      dims = {static_cast<hsize_t>(b.numel)};
      const Slice s = slice_of(b.numel, rank, world);
      slice = b.data + s.begin;
      if (b.sharded) {
        owned.resize(static_cast<std::size_t>(s.end - s.begin));
        ckpt::exchange_ranges(comm, b.owned, b.data, {{s.begin, s.end - s.begin}}, owned.data());
        slice = owned.data();
      }
      checksum = gathered_checksum(comm, world, b.numel, s, slice, kWrittenScheme);
    }
    run_collectively(ctx, [&] {
      h5::Dataspace space(RT_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
      h5::Dataset dset(RT_H5_CHECK(H5Dcreate2(file, b.name.c_str(), H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT)));
      h5::write_attr<std::uint64_t>(dset, "checksum", checksum);
      if (b.numel == 0) return;  // no storage to write to (the same on every rank)
      if (b.per_rank) {
        transfer(dset, dims, {static_cast<hsize_t>(rank), 0}, b.numel, 1, dxpl, b.data, true);
      } else {
        const Slice s = slice_of(b.numel, rank, world);
        transfer(dset, dims, {static_cast<hsize_t>(s.begin)}, s.end - s.begin, transfer_rounds(b.numel, world), dxpl,
                 slice, true);
      }
    });
  }
  // Flushing through the MPI-IO driver syncs every rank's written data to storage.
  run_collectively(ctx, [&] { RT_H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL)); });
  run_collectively(ctx, [&] { RT_H5_CHECK(file.close()); });
  run_collectively(ctx, [&] {
    if (rank == 0) ckpt::release_unused_room(path);
  });
}

CheckpointMeta inspect_checkpoint_file(const std::string& path, bool verify, std::vector<CheckpointDataset>* datasets) {
  const auto lock = h5::lock();
  const h5::ErrorContext where(path);
  h5::File file = open_local(path);
  CheckpointMeta meta = read_meta(file, path);
  if (datasets == nullptr && !verify) return meta;
  for (const std::string& name : dataset_names(file)) {
    h5::Dataset dset(RT_H5_CHECK(H5Dopen2(file, name.c_str(), H5P_DEFAULT)));
    CheckpointDataset d;
    d.name = name;
    d.dims = dims_of(dset, path, name);
    d.stored_checksum = stored_checksum(dset, path, name);
    if (verify) {
      std::int64_t numel = 1;
      for (auto x : d.dims) numel *= x;
      std::vector<float> data(static_cast<std::size_t>(numel));
      try {
        if (numel > 0) RT_H5_CHECK(H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()));
      } catch (const DataError& e) {
        throw CorruptFileError(e.what());
      }
      d.actual_checksum =
          ckpt::buffer_checksum(ckpt::checksum_scheme(meta.format_version), data.data(), numel * kFloatBytes);
      d.verified = true;
      if (d.actual_checksum != d.stored_checksum)
        throw CorruptFileError(
            fmt::format("{}: dataset '{}': checksum mismatch (stored {:016x}, data {:016x}): the "
                        "file is damaged",
                        path, name, d.stored_checksum, d.actual_checksum));
    }
    if (datasets) datasets->push_back(std::move(d));
  }
  return meta;
}

void check_checkpoint_layout(const std::string& path, const std::vector<CheckpointBuffer>& expected) {
  const auto lock = h5::lock();
  const h5::ErrorContext where(path);
  as_corrupt([&] { check_layout(path, expected); });
}

CheckpointMeta read_checkpoint_file(const Context& ctx, const std::string& path,
                                    const std::vector<CheckpointBuffer>& buffers, std::vector<std::string>* absent) {
  const MPI_Comm comm = world_comm(ctx);
  const int world = ctx.world_size();
  const int rank = ctx.world_rank();
  const auto lock = h5::lock();
  const h5::ErrorContext where(path);
  h5::File file;
  CheckpointMeta meta;
  std::vector<std::string> found;  // every rank lists the same file
  run_collectively(ctx, [&] {
    require_readable(path);
    h5::PropList fapl = mpio_file_access(comm);
    try {
      file = h5::File(h5::open_read_only_file(path, fapl));
    } catch (const DataError& e) {
      throw CorruptFileError(fmt::format("cannot open as a checkpoint: {}", e.what()));
    }
    as_corrupt([&] {
      meta = read_meta(file, path);
      found = dataset_names(file);
    });
  });
  const ckpt::ChecksumScheme scheme = ckpt::checksum_scheme(meta.format_version);
  h5::PropList dxpl = collective_transfer();
  for (const CheckpointBuffer& b : buffers) {
    if (b.optional && std::find(found.begin(), found.end(), b.name) == found.end()) {
      if (absent != nullptr) absent->push_back(b.name);
      continue;
    }
    std::uint64_t stored = 0, actual = 0;
    const Slice s = slice_of(b.numel, rank, world);
    std::vector<float> owned;  // sharded buffers: this rank's slice, sent to its owners once verified
    if (b.sharded) owned.resize(static_cast<std::size_t>(s.end - s.begin));
    float* slice = b.sharded ? owned.data() : b.data + s.begin;
    run_collectively(ctx, [&] {
      as_corrupt([&] {
        h5::Dataset dset(RT_H5_CHECK(H5Dopen2(file, b.name.c_str(), H5P_DEFAULT)));
        stored = stored_checksum(dset, path, b.name);
        // Checked again here: the file may have changed since the layout check, or the caller
        // made none.
        const std::vector<std::int64_t> dims = checked_dims(dset, path, b);
        if (b.numel == 0) {
          actual = ckpt::buffer_checksum(scheme, nullptr, 0);
        } else if (b.per_rank) {
          std::vector<float> rows(static_cast<std::size_t>(dims[0] * dims[1]));
          RT_H5_CHECK(H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()));
          actual = ckpt::buffer_checksum(scheme, rows.data(), static_cast<std::int64_t>(rows.size()) * kFloatBytes);
          if (dims[0] == world) {
            std::copy_n(rows.data() + rank * b.numel, b.numel, b.data);
          } else {  // another world size: every rank starts from the mean of the writers' rows
            for (std::int64_t i = 0; i < b.numel; ++i) {
              double sum = 0.0;
              for (std::int64_t r = 0; r < dims[0]; ++r) sum += rows[static_cast<std::size_t>(r * b.numel + i)];
              b.data[i] = static_cast<float>(sum / static_cast<double>(dims[0]));
            }
          }
        } else {
          const std::vector<hsize_t> extent = {static_cast<hsize_t>(b.numel)};
          transfer(dset, extent, {static_cast<hsize_t>(s.begin)}, s.end - s.begin, transfer_rounds(b.numel, world),
                   dxpl, slice, false);
        }
      });
    });
    if (!b.per_rank && b.numel > 0) {
      actual = gathered_checksum(comm, world, b.numel, s, slice, scheme);
      if (!b.sharded)
        allgather_slices(comm, world, b.numel, b.data);
      else
        ckpt::exchange_ranges(comm, {{s.begin, s.end - s.begin}}, slice, b.owned, b.data);
    }
    // Every rank computed the same checksum of the same bytes, so all agree without a vote.
    if (actual != stored)
      throw CollectiveError(fmt::format("{}: dataset '{}': checksum mismatch (stored {:016x}, data {:016x}): the file "
                                        "is damaged",
                                        path, b.name, stored, actual),
                            true);
  }
  run_collectively(ctx, [&] { RT_H5_CHECK(file.close()); });
  return meta;
}

void read_checkpoint_params(const Context& ctx, const std::string& path, const ParamLayout& layout, float* arena) {
  const ParamLayout::Packing packing = layout.packing_of_arena();
  if (packing.identity()) {
    read_checkpoint_file(ctx, path, {{"params", arena, layout.logical_elements()}});
    return;
  }
  std::vector<float> logical(static_cast<std::size_t>(layout.logical_elements()));
  read_checkpoint_file(ctx, path, {{"params", logical.data(), layout.logical_elements()}});
  unpack(packing, logical.data(), arena);
}

}  // namespace ringtrain
