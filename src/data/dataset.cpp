// Dataset::open: per-rank checks of every file (agreed on by all ranks before any collective
// call, so one rank's bad file cannot leave its peers inside a collective), then each rank reads
// its shard (1/W of the global index, ranks ordered node by node) of the labels, and of the
// samples for the memory strategy, and scans float samples for NaN/Inf; labels and the list of
// excluded samples are then shared with all ranks, samples within each node.
#include "ringtrain/data/dataset.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>

#include "data/dataset_open.hpp"
#include "data/h5_io.hpp"
#include "hdf5/h5_file_problem.hpp"
#include "data/node_memory.hpp"
#include "check/mpi_check.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/name_table.hpp"
#include "ringtrain/data/sampler.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/tensor/dtype.hpp"
#include "runtime/mpi_context.hpp"

namespace ringtrain {

using Clock = std::chrono::steady_clock;

struct Dataset::Resident {
  Resident(MPI_Comm world, MPI_Comm node, std::size_t bytes, const std::string& path)
      : buffer(world, node, bytes, path) {}
  data::NodeSharedBuffer buffer;
};

std::size_t sample_type_size(SampleType t) {
  switch (t) {
    case SampleType::u8:
    case SampleType::i8: return 1;
    case SampleType::u16:
    case SampleType::i16:
    case SampleType::f16: return 2;
    case SampleType::u32:
    case SampleType::i32:
    case SampleType::f32: return 4;
    case SampleType::u64:
    case SampleType::i64:
    case SampleType::f64: return 8;
  }
  return 0;
}

std::string_view sample_type_name(SampleType t) {
  switch (t) {
    case SampleType::u8: return "uint8";
    case SampleType::i8: return "int8";
    case SampleType::u16: return "uint16";
    case SampleType::i16: return "int16";
    case SampleType::u32: return "uint32";
    case SampleType::i32: return "int32";
    case SampleType::u64: return "uint64";
    case SampleType::i64: return "int64";
    case SampleType::f16: return "float16";
    case SampleType::f32: return "float32";
    case SampleType::f64: return "float64";
  }
  return "?";
}

namespace {
constexpr NameTable<ReadStrategy> kReadStrategies[] = {{"memory", ReadStrategy::memory},
                                                       {"stream", ReadStrategy::stream}};
}  // namespace

std::optional<ReadStrategy> read_strategy_from_name(std::string_view name) {
  return value_of_name(kReadStrategies, name);
}
std::string_view read_strategy_name(ReadStrategy s) { return name_of_value(kReadStrategies, s); }
std::vector<std::string> read_strategy_names() { return names_of(kReadStrategies); }

Dataset::~Dataset() = default;

const DatasetFile& Dataset::file_of(std::int64_t i) const {
  RT_REQUIRE(i >= 0 && i < size_, DataError, "sample {} is outside [0, {})", i, size_);
  const auto it = std::upper_bound(files_.begin(), files_.end(), i,
                                   [](std::int64_t v, const DatasetFile& f) { return v < f.first; });
  return *(it - 1);
}

const std::byte* Dataset::resident_sample(std::int64_t i) const {
  RT_REQUIRE(resident_ != nullptr, DataError, "{}: samples are not held in memory (data.strategy = \"stream\")",
             files_.front().path);
  return resident_->buffer.data() + i * sample_bytes();
}

namespace {

// A failure found without an exception ("" when none), agreed like one.
void agree_on(MPI_Comm comm, const std::string& failure) {
  data::agreed(comm, [&] { RT_REQUIRE(failure.empty(), DataError, "{}", failure); });
}

struct Catalog {
  std::vector<DatasetFile> files;
  data::FileSchema schema;  // the first file's; all others match it
  std::int64_t total = 0;
};

Catalog read_catalog(const DatasetSpec& spec) {
  const auto guard = h5::lock();
  Catalog c;
  for (const auto& path : data::expand_sources(spec.sources)) {
    const std::string problem = h5::local_file_problem(path);
    RT_REQUIRE(problem.empty(), DataError, "{}", problem);
    const FileStamp stamp = data::stamp_of(path);
    const data::FileSchema s = data::read_file_schema(path, spec.images_key, spec.labels_key);
    if (!c.files.empty()) {
      const data::FileSchema& f = c.schema;
      const std::string& first = c.files.front().path;
      RT_REQUIRE(s.type_name == f.type_name && s.sample_dims == f.sample_dims, DataError,
                 "{}: dataset '{}' holds {} samples of [{}] but {} holds {} samples of [{}]", path, spec.images_key,
                 s.type_name, fmt::join(s.sample_dims, ", "), first, f.type_name, fmt::join(f.sample_dims, ", "));
      RT_REQUIRE(s.label_type_name == f.label_type_name, DataError, "{}: dataset '{}' is {} but {} has {}", path,
                 spec.labels_key, s.label_type_name, first, f.label_type_name);
    } else {
      c.schema = s;
    }
    c.files.push_back(DatasetFile{path, c.total, s.samples, s.chunk_rows, stamp});
    RT_REQUIRE(!__builtin_add_overflow(c.total, s.samples, &c.total), DataError,
               "{}: dataset '{}': {} samples more than the files before it make over {} in all", path, spec.images_key,
               s.samples, INT64_MAX);
  }
  for (const DatasetFile& f : c.files) data::require_readable_storage(f.path, {spec.images_key, spec.labels_key});
  return c;
}

// A sample that holds NaN or Inf.
struct NonFiniteSample {
  std::int64_t index = 0;
  bool nan = false;
};

template <typename T>
void scan_as(const std::byte* samples, std::int64_t numel, std::int64_t first, std::int64_t count,
             std::vector<NonFiniteSample>& bad) {
  for (std::int64_t s = 0; s < count; ++s) {
    const auto* v = reinterpret_cast<const T*>(samples) + s * numel;
    for (std::int64_t j = 0; j < numel; ++j) {
      bool finite = true, nan = false;
      if constexpr (std::is_same_v<T, std::uint16_t>) {  // float16 bits
        finite = (v[j] & 0x7c00u) != 0x7c00u;
        nan = !finite && (v[j] & 0x03ffu) != 0;
      } else {
        finite = std::isfinite(v[j]);
        nan = std::isnan(v[j]);
      }
      if (!finite) {
        bad.push_back({first + s, nan});
        break;
      }
    }
  }
}

// Appends the samples among [first, first + count) (held at `samples`) that are not finite.
void scan_nonfinite(SampleType type, const std::byte* samples, std::int64_t numel, std::int64_t first,
                    std::int64_t count, std::vector<NonFiniteSample>& bad) {
  switch (type) {
    case SampleType::f16: scan_as<std::uint16_t>(samples, numel, first, count, bad); break;
    case SampleType::f32: scan_as<float>(samples, numel, first, count, bad); break;
    case SampleType::f64: scan_as<double>(samples, numel, first, count, bad); break;
    default: break;  // integers are always finite
  }
}

template <typename T>
std::vector<T> allgather_varying(MPI_Comm world, const std::vector<T>& mine, MPI_Datatype type) {
  int size = 0;
  RT_MPI_CHECK(MPI_Comm_size(world, &size));
  int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(counts.size());
  RT_MPI_CHECK(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, world));
  std::int64_t total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    displs[r] = static_cast<int>(total);
    total += counts[r];
  }
  std::vector<T> all(static_cast<std::size_t>(total));
  RT_MPI_CHECK(MPI_Allgatherv(mine.data(), count, type, all.data(), counts.data(), displs.data(), type, world));
  return all;
}

}  // namespace

// Builds a Dataset step by step; a friend of Dataset, so the class keeps no setters.
class DatasetOpener {
 public:
  DatasetOpener(MPI_Comm world, MPI_Comm node, const DatasetSpec& spec)
      : world_(world), node_(node), ds_(new Dataset()) {
    ds_->spec_ = spec;
    RT_MPI_CHECK(MPI_Comm_size(world, &world_size_));
  }

  std::shared_ptr<const Dataset> open() {
    auto t = Clock::now();
    // Adds the time since the last lap to `into`.
    auto lap = [&](double& into) {
      const auto now = Clock::now();
      into += std::chrono::duration<double>(now - t).count();
      t = now;
    };
    DatasetOpenStats& stats = ds_->open_stats_;
    Catalog catalog;
    data::agreed(world_, [&] {
      RT_REQUIRE(ds_->spec_.read_block_bytes > 0, DataError, "read_block_bytes must be > 0, got {}",
                 ds_->spec_.read_block_bytes);
      catalog = read_catalog(ds_->spec_);
    });
    ds_->files_ = std::move(catalog.files);
    ds_->size_ = catalog.total;
    ds_->sample_shape_ = Shape(catalog.schema.sample_dims);
    ds_->sample_type_ = catalog.schema.type;
    data::require_same_files(world_, ds_->files_,
                             fmt::format("{} {}", ds_->sample_shape_.str(), sample_type_name(ds_->sample_type_)));

    order_ = data::node_order(world_, node_);
    shard_ = even_shard(ds_->size_, world_size_, order_.position);
    labels_.resize(static_cast<std::size_t>(shard_.end - shard_.begin));
    lap(stats.check);
    if (ds_->spec_.strategy == ReadStrategy::memory) {
      allocate_memory();
      lap(stats.allocate);
      data::agreed(world_, [&] { read_memory(); });
    } else {
      data::agreed(world_, [&] { read_stream(); });
    }
    lap(stats.read);
    share_labels();
    settle_nonfinite();
    if (ds_->resident_)
      data::complete_node_copy(world_, order_, ds_->resident_->buffer, ds_->size_, ds_->sample_bytes());
    lap(stats.share);
    return std::shared_ptr<const Dataset>(ds_.release());
  }

 private:
  std::int64_t rows_per_read(std::int64_t row_bytes) const {
    return std::max<std::int64_t>(1, ds_->spec_.read_block_bytes / row_bytes);
  }

  // The node's copy, with this rank's part backed by memory (all ranks agreeing it worked).
  void allocate_memory() {
    const auto sb = static_cast<std::size_t>(ds_->sample_bytes());
    ds_->resident_ = std::make_unique<Dataset::Resident>(world_, node_, static_cast<std::size_t>(ds_->size_) * sb,
                                                         ds_->files_.front().path);
    data::populate_shard(world_, ds_->resident_->buffer, shard_, ds_->sample_bytes(), ds_->files_.front().path);
  }

  // Each rank reads its shard of every file straight into the node's shared copy, in large
  // contiguous H5Dreads through the POSIX driver, on its own: no collective call can then be
  // left waiting for a rank whose read failed (the caller agrees on failures afterwards). For
  // these whole-shard reads this is also the fast path: measured on 2 ranks, 59-62% of raw
  // pread bandwidth against 29-59% for collective MPI-IO transfers of the same hyperslabs,
  // which only add an exchange through aggregator buffers when each rank's part is contiguous.
  void read_memory() {
    const std::int64_t sb = ds_->sample_bytes();
    std::byte* base = ds_->resident_->buffer.data();
    const auto guard = h5::lock();
    data::for_each_file_in_shard(ds_->files_, shard_, [&](const DatasetFile& f, data::Rows rows, hid_t file) {
      const std::int64_t at = f.first + rows.begin;
      const h5::Dataset images = data::open_dataset(file, f.path, ds_->spec_.images_key);
      const h5::Datatype mem = data::native_type_of(images);
      const std::int64_t per_read = rows_per_read(sb);
      data::read_rows(images, mem, rows.begin, rows.count(), per_read, H5P_DEFAULT,
                      data::read_calls(rows.count(), per_read), base + at * sb);
      ds_->open_stats_.read_bytes += rows.count() * (sb + static_cast<std::int64_t>(sizeof(std::int32_t)));
      read_labels(file, f, rows);
    });
    scan_nonfinite(ds_->sample_type_, base + shard_.begin * sb, ds_->sample_numel(), shard_.begin,
                   shard_.end - shard_.begin, bad_);
  }

  // Independent reads with the POSIX driver: labels, and float samples piece by piece for the
  // NaN/Inf scan (samples are otherwise read while training).
  void read_stream() {
    const std::int64_t sb = ds_->sample_bytes();
    const bool scan = is_float(ds_->sample_type_);
    Tensor piece;  // 64-byte aligned: see LoadedGroup in loader.cpp
    const auto guard = h5::lock();
    data::for_each_file_in_shard(ds_->files_, shard_, [&](const DatasetFile& f, data::Rows rows, hid_t file) {
      read_labels(file, f, rows);
      ds_->open_stats_.read_bytes += rows.count() * static_cast<std::int64_t>(sizeof(std::int32_t));
      if (!scan) return;
      const h5::Dataset images = data::open_dataset(file, f.path, ds_->spec_.images_key);
      const h5::Datatype mem = data::native_type_of(images);
      const std::int64_t per_read = rows_per_read(sb);
      if (piece.numel() < std::min(per_read, rows.count()) * sb)
        piece = Tensor::empty(Shape{std::min(per_read, rows.count()) * sb}, DType::u8);
      for (std::int64_t r = rows.begin; r < rows.end; r += per_read) {
        const std::int64_t n = std::min(per_read, rows.end - r);
        data::read_rows(images, mem, r, n, per_read, H5P_DEFAULT, 1, piece.raw());
        ds_->open_stats_.read_bytes += n * sb;
        scan_nonfinite(ds_->sample_type_, static_cast<const std::byte*>(piece.raw()), ds_->sample_numel(), f.first + r,
                       n, bad_);
      }
    });
  }

  // File f's labels in `rows` into this rank's shard of them.
  void read_labels(hid_t file, const DatasetFile& f, data::Rows rows) {
    const h5::Dataset labels = data::open_dataset(file, f.path, ds_->spec_.labels_key);
    const std::int64_t per_read = rows_per_read(sizeof(std::int32_t));
    data::read_rows(labels, H5T_NATIVE_INT32, rows.begin, rows.count(), per_read, H5P_DEFAULT,
                    data::read_calls(rows.count(), per_read), labels_.data() + (f.first + rows.begin - shard_.begin));
  }

  void share_labels() {
    int world_rank = 0;
    RT_MPI_CHECK(MPI_Comm_rank(world_, &world_rank));
    std::vector<int> counts(static_cast<std::size_t>(world_size_)), displs(counts.size());
    for (int r = 0; r < world_size_; ++r) {
      const Shard s = even_shard(ds_->size_, world_size_, order_.positions[static_cast<std::size_t>(r)]);
      RT_REQUIRE(s.end <= INT_MAX, DataError, "{}: more than {} samples", ds_->files_.front().path, INT_MAX);
      counts[static_cast<std::size_t>(r)] = static_cast<int>(s.end - s.begin);
      displs[static_cast<std::size_t>(r)] = static_cast<int>(s.begin);
    }
    ds_->labels_.resize(static_cast<std::size_t>(ds_->size_));
    RT_MPI_CHECK(MPI_Allgatherv(labels_.data(), counts[static_cast<std::size_t>(world_rank)], MPI_INT32_T,
                                ds_->labels_.data(), counts.data(), displs.data(), MPI_INT32_T, world_));
  }

  void settle_nonfinite() {
    if (!is_float(ds_->sample_type_)) return;
    if (ds_->spec_.nonfinite == NonFinite::error) {
      std::string failure;
      if (!bad_.empty()) {
        const DatasetFile& f = ds_->file_of(bad_.front().index);
        failure =
            fmt::format("{}: dataset '{}': sample {} holds {} (data.nonfinite = \"skip\" leaves such samples out)",
                        f.path, ds_->spec_.images_key, bad_.front().index - f.first, bad_.front().nan ? "NaN" : "Inf");
      }
      agree_on(world_, failure);
      return;
    }
    std::vector<std::int64_t> mine;
    mine.reserve(bad_.size());
    for (const auto& b : bad_) mine.push_back(b.index);
    ds_->excluded_ = allgather_varying(world_, mine, MPI_INT64_T);
    std::sort(ds_->excluded_.begin(), ds_->excluded_.end());
    RT_REQUIRE(ds_->usable_size() > 0, DataError, "{}: dataset '{}': every sample holds NaN or Inf",
               ds_->files_.front().path, ds_->spec_.images_key);
  }

  MPI_Comm world_;
  MPI_Comm node_;
  int world_size_ = 1;
  std::unique_ptr<Dataset> ds_;
  data::NodeOrder order_;
  Shard shard_;                       // this rank's part of the global index
  std::vector<std::int32_t> labels_;  // this rank's shard of the labels
  std::vector<NonFiniteSample> bad_;  // in this rank's shard
};

std::shared_ptr<const Dataset> Dataset::open(const Context& ctx, const DatasetSpec& spec) {
  return data::open_dataset(world_comm(ctx), ctx.impl().node, spec);
}

namespace data {
std::shared_ptr<const Dataset> open_dataset(MPI_Comm world, MPI_Comm node, const DatasetSpec& spec) {
  return DatasetOpener(world, node, spec).open();
}
}  // namespace data

}  // namespace ringtrain
