// A labelled sample dataset spread over one or more HDF5 files that share a schema (sample
// dataset of any numeric dtype [N, C, H, W], integer labels [N]); the global sample index runs
// through the files in order. Opened collectively; every problem is a DataError naming the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

class Context;

// Element types a sample may have on disk; every one is converted to float when batched.
enum class SampleType : std::uint8_t { u8, i8, u16, i16, u32, i32, u64, i64, f16, f32, f64 };
std::size_t sample_type_size(SampleType t);
std::string_view sample_type_name(SampleType t);  // "uint8", "float16", ...

// Bytes of the files `sources` (files or globs, as data.train) name; 0 when they cannot be
// listed (opening them says why). What reading a dataset may take is sized by it.
std::int64_t dataset_file_bytes(const std::vector<std::string>& sources);
constexpr bool is_float(SampleType t) { return t == SampleType::f16 || t == SampleType::f32 || t == SampleType::f64; }

// memory: the whole dataset is read once (collectively, in large contiguous hyperslabs) into
// memory shared by the ranks of each node, and epochs are served from there. stream: samples
// are read while training, block (HDF5 chunk) by block, in a block-shuffled order.
enum class ReadStrategy : std::uint8_t { memory, stream };
std::optional<ReadStrategy> read_strategy_from_name(std::string_view name);
std::string_view read_strategy_name(ReadStrategy s);
std::vector<std::string> read_strategy_names();  // "memory", "stream": what read_strategy_from_name knows

// What to do with float samples that hold NaN or Inf (checked when the dataset is opened).
enum class NonFinite : std::uint8_t { error, skip };

struct DatasetSpec {
  // Files or glob patterns (a pattern expands to its matches, sorted); their samples are
  // concatenated in this order.
  std::vector<std::string> sources;
  std::string images_key = "images";
  std::string labels_key = "labels";
  ReadStrategy strategy = ReadStrategy::memory;
  NonFinite nonfinite = NonFinite::error;
  // Most bytes one read moves (whole samples, at least one): keeps MPI-IO counts far below
  // INT_MAX and bounds the temporary buffers.
  std::int64_t read_block_bytes = std::int64_t{64} << 20;
};

// A data file as the run found it when it opened the dataset (stat): a stream reader checks at
// every read that the file it reads is still that one, unchanged, so a file rewritten during a
// run is an error, never mixed data or a read sized by a new shape.
struct FileStamp {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::int64_t bytes = 0;
  std::int64_t mtime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

struct DatasetFile {
  std::string path;
  std::int64_t first = 0;  // global index of its first sample
  std::int64_t samples = 0;
  std::int64_t chunk_rows = 0;  // samples per HDF5 chunk of the sample dataset; 0: not chunked
  FileStamp stamp;
};

// What Dataset::open cost this rank: seconds per phase, and bytes read from the files.
struct DatasetOpenStats {
  double check = 0.0;     // finding and checking the files
  double allocate = 0.0;  // memory strategy: backing this rank's part of the node's copy
  double read = 0.0;      // reading this rank's shard (samples for memory, else labels and float scan)
  double share = 0.0;     // exchanging labels, excluded samples and (between nodes) samples
  std::int64_t read_bytes = 0;
};

class Dataset {
 public:
  // Collective over ctx's world (every rank passes the same spec). Checks every file on every
  // rank, reads all labels, scans float samples for NaN/Inf, and for the memory strategy
  // reads the samples.
  static std::shared_ptr<const Dataset> open(const Context& ctx, const DatasetSpec& spec);
  ~Dataset();
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  const DatasetSpec& spec() const { return spec_; }
  const std::vector<DatasetFile>& files() const { return files_; }
  std::int64_t size() const { return size_; }                  // all samples, excluded ones included
  const Shape& sample_shape() const { return sample_shape_; }  // [C, H, W]
  std::int64_t sample_numel() const { return sample_shape_.numel(); }
  SampleType sample_type() const { return sample_type_; }
  std::int64_t sample_bytes() const {
    return sample_numel() * static_cast<std::int64_t>(sample_type_size(sample_type_));
  }
  std::int32_t label(std::int64_t i) const { return labels_[static_cast<std::size_t>(i)]; }

  // Samples left out (data.nonfinite = "skip"), sorted; the others, in order, are the ones
  // samplers draw from.
  const std::vector<std::int64_t>& excluded() const { return excluded_; }
  std::int64_t usable_size() const { return size_ - static_cast<std::int64_t>(excluded_.size()); }

  // The file holding global sample i, and i's row in it.
  const DatasetFile& file_of(std::int64_t i) const;

  // Memory strategy only: sample i's bytes (sample_type elements, native byte order).
  const std::byte* resident_sample(std::int64_t i) const;
  const DatasetOpenStats& open_stats() const { return open_stats_; }

  struct Resident;  // the node-shared copy of the samples (memory strategy)

 private:
  Dataset() = default;
  friend class DatasetOpener;

  DatasetSpec spec_;
  std::vector<DatasetFile> files_;
  std::int64_t size_ = 0;
  Shape sample_shape_;
  SampleType sample_type_ = SampleType::u8;
  std::vector<std::int32_t> labels_;
  std::vector<std::int64_t> excluded_;
  std::unique_ptr<Resident> resident_;
  DatasetOpenStats open_stats_;
};

}  // namespace ringtrain
