// TokenDataset::open: every rank checks every file (agreed on before any collective call, so
// one rank's bad file cannot leave its peers waiting); the memory strategy then has each rank
// read its shard of the token stream (1/W, ranks ordered node by node) into its node's shared
// copy and check it against the vocabulary, and the node leaders complete the copies.
#include "ringtrain/data/tokens.hpp"

#include <algorithm>
#include <climits>

#include "data/dataset_open.hpp"
#include "data/h5_io.hpp"
#include "data/node_memory.hpp"
#include "data/token_check.hpp"
#include "hdf5/h5_attributes.hpp"
#include "hdf5/h5_file_problem.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/data/sampler.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "runtime/mpi_context.hpp"

namespace ringtrain {

struct TokenDataset::Resident {
  Resident(MPI_Comm world, MPI_Comm node, std::size_t bytes, const std::string& path)
      : buffer(world, node, bytes, path) {}
  data::NodeSharedBuffer buffer;
};

SampleType token_type_for_vocab(std::int64_t vocab_size) {
  if (vocab_size <= 256) return SampleType::u8;
  if (vocab_size <= 65536) return SampleType::u16;
  return SampleType::u32;
}

std::optional<SampleType> token_type_from_name(const std::string& name) {
  for (const SampleType t : {SampleType::u8, SampleType::u16, SampleType::u32})
    if (name == sample_type_name(t)) return t;
  return std::nullopt;
}

TokenDataset::~TokenDataset() = default;

const std::byte* TokenDataset::resident_tokens() const {
  RT_REQUIRE(resident_ != nullptr, DataError, "{}: tokens are not held in memory (data.strategy = \"stream\")",
             files_.front().path);
  return resident_->buffer.data();
}

namespace {

// What one file holds, checked on its own.
struct TokenSchema {
  std::int64_t tokens = 0;
  SampleType type = SampleType::u16;
  std::int64_t vocab_size = 0;
  std::string tokenizer;
};

// Runs an attribute read; a malformed attribute's DataError gets `where` (the file, and the
// dataset) in front.
template <typename F>
auto read_named(const std::string& where, F&& read) {
  try {
    return read();
  } catch (const DataError& e) {
    throw DataError(fmt::format("{}: {}", where, e.what()));
  }
}

// The root's `format` attribute, when present, must name this schema (an image dataset
// passed as token data says so instead of failing on a missing `tokens`).
void check_format(hid_t file, const std::string& path) {
  if (RT_H5_CHECK(H5Aexists(file, "format")) <= 0) return;
  const std::string format = read_named(path, [&] { return h5::read_name_attr(file, "format"); });
  RT_REQUIRE(format == kTokenFormatName, DataError, "{}: holds a '{}' file, not token data (format '{}')", path, format,
             kTokenFormatName);
  if (RT_H5_CHECK(H5Aexists(file, "format_version")) <= 0) return;
  const auto version = read_named(path, [&] { return h5::read_attr<std::int64_t>(file, "format_version"); });
  RT_REQUIRE(version >= 1 && version <= kTokenFormatVersion, DataError,
             "{}: format '{}' version {} is not supported (this ringtrain reads versions 1 to {})", path, format,
             version, kTokenFormatVersion);
}

TokenSchema read_token_schema(const std::string& path, const std::string& key) {
  h5::ErrorContext where(path);
  const h5::File file = data::open_read_only(path);
  check_format(file, path);
  const h5::Dataset tokens = data::open_dataset(file, path, key);

  h5::Datatype type(RT_H5_CHECK(H5Dget_type(tokens)));
  const std::optional<SampleType> t = data::classify(type);
  RT_REQUIRE(t == SampleType::u8 || t == SampleType::u16 || t == SampleType::u32, DataError,
             "{}: dataset '{}' has dtype {}, expected uint8, uint16 or uint32", path, key, data::dtype_name(type));
  h5::Dataspace space(RT_H5_CHECK(H5Dget_space(tokens)));
  const int rank = RT_H5_CHECK(H5Sget_simple_extent_ndims(space));
  RT_REQUIRE(rank == 1, DataError, "{}: dataset '{}' has rank {}, expected 1 [tokens]", path, key, rank);
  hsize_t n = 0;
  RT_H5_CHECK(H5Sget_simple_extent_dims(space, &n, nullptr));
  RT_REQUIRE(n > 0, DataError, "{}: dataset '{}' is empty (0 tokens)", path, key);
  // Bounds the node copy's size (n times at most 4 bytes) well inside int64.
  RT_REQUIRE(n <= static_cast<hsize_t>(INT64_MAX / 8), DataError, "{}: dataset '{}' holds {} tokens, too many", path,
             key, n);

  TokenSchema s;
  s.tokens = static_cast<std::int64_t>(n);
  s.type = *t;
  for (const char* name : {"vocab_size", "tokenizer"})
    RT_REQUIRE(RT_H5_CHECK(H5Aexists(tokens, name)) > 0, DataError, "{}: dataset '{}' has no attribute '{}'", path, key,
               name);
  const std::string in_dataset = fmt::format("{}: dataset '{}'", path, key);
  s.vocab_size = read_named(in_dataset, [&] { return h5::read_attr<std::int64_t>(tokens, "vocab_size"); });
  RT_REQUIRE(s.vocab_size >= 1 && s.vocab_size <= kMaxVocabSize, DataError,
             "{}: dataset '{}': vocab_size {} is outside [1, {}]", path, key, s.vocab_size, kMaxVocabSize);
  s.tokenizer = read_named(in_dataset, [&] { return h5::read_name_attr(tokens, "tokenizer"); });
  return s;
}

struct TokenCatalog {
  std::vector<TokenFile> files;
  TokenSchema schema;  // the first file's; all others agree with it
  std::int64_t total = 0;
};

TokenCatalog read_token_catalog(const TokenDatasetSpec& spec) {
  RT_REQUIRE(spec.block_size > 0, DataError, "block_size must be > 0, got {}", spec.block_size);
  RT_REQUIRE(spec.read_block_bytes > 0, DataError, "read_block_bytes must be > 0, got {}", spec.read_block_bytes);
  const auto guard = h5::lock();
  TokenCatalog c;
  for (const auto& path : data::expand_sources(spec.sources)) {
    const std::string problem = h5::local_file_problem(path);
    RT_REQUIRE(problem.empty(), DataError, "{}", problem);
    const FileStamp stamp = data::stamp_of(path);
    const TokenSchema s = read_token_schema(path, spec.tokens_key);
    if (!c.files.empty()) {
      const TokenSchema& f = c.schema;
      const std::string& first = c.files.front().path;
      RT_REQUIRE(s.type == f.type, DataError, "{}: dataset '{}' holds {} tokens but {} holds {}", path, spec.tokens_key,
                 sample_type_name(s.type), first, sample_type_name(f.type));
      RT_REQUIRE(s.vocab_size == f.vocab_size, DataError, "{}: vocab_size is {} but {} has {}", path, s.vocab_size,
                 first, f.vocab_size);
      RT_REQUIRE(s.tokenizer == f.tokenizer, DataError, "{}: tokenizer is '{}' but {} has '{}'", path, s.tokenizer,
                 first, f.tokenizer);
    } else {
      c.schema = s;
    }
    RT_REQUIRE(c.total <= INT64_MAX / 8 - s.tokens, DataError, "{}: the files hold too many tokens", path);
    c.files.push_back(TokenFile{path, c.total, s.tokens, stamp});
    c.total += s.tokens;
  }
  const std::string& first = c.files.front().path;
  const std::string which =
      c.files.size() == 1 ? first : fmt::format("{} (and {} more files)", first, c.files.size() - 1);
  RT_REQUIRE(c.total >= spec.block_size + 1, DataError,
             "{}: {} tokens are fewer than one window of block_size + 1 = {} tokens", which, c.total,
             spec.block_size + 1);
  for (const TokenFile& f : c.files) data::require_readable_storage(f.path, {spec.tokens_key});
  return c;
}

}  // namespace

// Builds a TokenDataset step by step; a friend of TokenDataset, so the class keeps no setters.
class TokenDatasetOpener {
 public:
  TokenDatasetOpener(MPI_Comm world, MPI_Comm node, const TokenDatasetSpec& spec)
      : world_(world), node_(node), ds_(new TokenDataset()) {
    ds_->spec_ = spec;
  }

  std::shared_ptr<const TokenDataset> open() {
    TokenCatalog catalog;
    data::agreed(world_, [&] { catalog = read_token_catalog(ds_->spec_); });
    ds_->files_ = std::move(catalog.files);
    ds_->size_ = catalog.total;
    ds_->vocab_size_ = catalog.schema.vocab_size;
    ds_->tokenizer_ = catalog.schema.tokenizer;
    ds_->token_type_ = catalog.schema.type;
    data::require_same_files(world_, ds_->files_,
                             fmt::format("{} vocabulary {} tokenizer {}", sample_type_name(ds_->token_type_),
                                         ds_->vocab_size_, ds_->tokenizer_));
    if (ds_->spec_.strategy == ReadStrategy::memory) read_memory();
    return std::shared_ptr<const TokenDataset>(ds_.release());
  }

 private:
  void read_memory() {
    const data::NodeOrder order = data::node_order(world_, node_);
    const Shard shard = even_shard(ds_->size_, order.node_begin.back(), order.position);
    const auto tb = static_cast<std::int64_t>(sample_type_size(ds_->token_type_));
    ds_->resident_ = std::make_unique<TokenDataset::Resident>(world_, node_, static_cast<std::size_t>(ds_->size_ * tb),
                                                              ds_->files_.front().path);
    std::byte* base = ds_->resident_->buffer.data();
    data::populate_shard(world_, ds_->resident_->buffer, shard, tb, ds_->files_.front().path);
    // Independent reads through the POSIX driver, as Dataset's memory strategy does (see there).
    data::agreed(world_, [&] {
      const auto guard = h5::lock();
      const std::int64_t per_read = std::max<std::int64_t>(1, ds_->spec_.read_block_bytes / tb);
      data::for_each_file_in_shard(ds_->files_, shard, [&](const TokenFile& f, data::Rows rows, hid_t file) {
        const h5::Dataset tokens = data::open_dataset(file, f.path, ds_->spec_.tokens_key);
        const h5::Datatype mem = data::native_type_of(tokens);
        std::byte* out = base + (f.first + rows.begin) * tb;
        data::read_rows(tokens, mem, rows.begin, rows.count(), per_read, H5P_DEFAULT,
                        data::read_calls(rows.count(), per_read), out);
        data::check_tokens(ds_->token_type_, out, rows.count(), ds_->vocab_size_, f.path, ds_->spec_.tokens_key,
                           rows.begin);
      });
    });
    data::complete_node_copy(world_, order, ds_->resident_->buffer, ds_->size_, tb);
  }

  MPI_Comm world_;
  MPI_Comm node_;
  std::unique_ptr<TokenDataset> ds_;
};

std::shared_ptr<const TokenDataset> TokenDataset::open(const Context& ctx, const TokenDatasetSpec& spec) {
  return data::open_token_dataset(world_comm(ctx), ctx.impl().node, spec);
}

namespace data {
std::shared_ptr<const TokenDataset> open_token_dataset(MPI_Comm world, MPI_Comm node, const TokenDatasetSpec& spec) {
  return TokenDatasetOpener(world, node, spec).open();
}
}  // namespace data

}  // namespace ringtrain
