// The text and token-file converters (see header). Sizes are known before writing (file sizes,
// llm.c headers), so each output is created at its final length under `<path>.tmp`, filled
// piece by piece, then fsynced and renamed into place as the IDX converter does.
#include "ringtrain/data/token_convert.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/ranges.h>

#include "data/dataset_open.hpp"
#include "data/token_check.hpp"
#include "hdf5/h5_attributes.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/files.hpp"
#include "ringtrain/core/name_table.hpp"
#include "ringtrain/core/version.hpp"
#include "ringtrain/data/tokens.hpp"

namespace ringtrain {

// Inputs are little-endian on disk and read with memcpy.
static_assert(std::endian::native == std::endian::little, "the token converters assume a little-endian host");

namespace {

namespace fs = std::filesystem;

// Bytes read from an input at a time.
constexpr std::size_t kReadBytes = std::size_t{16} << 20;

hid_t file_type_of(SampleType t) {
  switch (t) {
    case SampleType::u8: return H5T_STD_U8LE;
    case SampleType::u16: return H5T_STD_U16LE;
    default: return H5T_STD_U32LE;
  }
}

hid_t memory_type_of(SampleType t) {
  switch (t) {
    case SampleType::u8: return H5T_NATIVE_UINT8;
    case SampleType::u16: return H5T_NATIVE_UINT16;
    default: return H5T_NATIVE_UINT32;
  }
}

// One token dataset file, created at its final length and filled in order by append().
class TokenFileWriter {
 public:
  struct Schema {
    SampleType type = SampleType::u8;
    std::int64_t vocab_size = 0;
    std::string tokenizer;
    std::vector<std::string> sources;
    std::int64_t chunk_tokens = 0;
  };

  TokenFileWriter(std::string path, std::int64_t tokens, const Schema& schema)
      : path_(std::move(path)), tmp_path_(path_ + ".tmp"), tokens_(tokens) {
    try {
      create(schema);
    } catch (...) {
      discard();
      throw;
    }
  }

  ~TokenFileWriter() {
    if (!done_) discard();
  }
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // The next n tokens, of type `type` in native order.
  void append(const std::byte* tokens, std::int64_t n, SampleType type) {
    if (n == 0) return;
    h5::ErrorContext where(path_);
    RT_REQUIRE(written_ + n <= tokens_, DataError, "{}: more tokens than the {} planned", path_, tokens_);
    const auto start = static_cast<hsize_t>(written_);
    const auto count = static_cast<hsize_t>(n);
    h5::Dataspace file_space(RT_H5_CHECK(H5Dget_space(dataset_)));
    RT_H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &start, nullptr, &count, nullptr));
    h5::Dataspace mem_space(RT_H5_CHECK(H5Screate_simple(1, &count, nullptr)));
    RT_H5_CHECK(H5Dwrite(dataset_, memory_type_of(type), mem_space, file_space, H5P_DEFAULT, tokens));
    written_ += n;
  }

  TokenFileWritten finish() {
    h5::ErrorContext where(path_);
    RT_REQUIRE(written_ == tokens_, DataError, "{}: {} tokens written of the {} planned (an input changed size?)",
               path_, written_, tokens_);
    dataset_.reset();
    RT_H5_CHECK(file_.close());
    fsync_path(tmp_path_, false);
    std::error_code ec;
    fs::rename(tmp_path_, path_, ec);
    RT_REQUIRE(!ec, IoError, "{}: cannot rename {} into place: {}", path_, tmp_path_, ec.message());
    fsync_path(fs::absolute(fs::path(path_)).parent_path().string(), true);
    done_ = true;
    return TokenFileWritten{path_, tokens_};
  }

 private:
  void create(const Schema& schema) {
    h5::ErrorContext where(path_);
    RT_REQUIRE(schema.chunk_tokens > 0, DataError, "{}: chunk_tokens must be > 0, got {}", path_, schema.chunk_tokens);
    create_parent_directories(path_);
    std::error_code ec;
    fs::remove(tmp_path_, ec);  // a stale temp from an interrupted run
    file_ = h5::File(RT_H5_CHECK(H5Fcreate(tmp_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)));
    const auto dims = static_cast<hsize_t>(tokens_);
    const auto chunk = static_cast<hsize_t>(std::min(schema.chunk_tokens, tokens_));
    h5::Dataspace space(RT_H5_CHECK(H5Screate_simple(1, &dims, nullptr)));
    h5::PropList dcpl(RT_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
    RT_H5_CHECK(H5Pset_chunk(dcpl, 1, &chunk));
    // Every token gets written, so pre-filling chunks would only double the I/O.
    RT_H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
    dataset_ = h5::Dataset(
        RT_H5_CHECK(H5Dcreate2(file_, "tokens", file_type_of(schema.type), space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
    h5::write_attr<std::int64_t>(dataset_, "vocab_size", schema.vocab_size);
    h5::write_string_attr(dataset_, "tokenizer", {schema.tokenizer}, true);
    h5::write_string_attr(file_, "format", {kTokenFormatName}, true);
    h5::write_attr<std::int32_t>(file_, "format_version", kTokenFormatVersion);
    h5::write_string_attr(file_, "writer", {std::string("ringtrain ") + version()}, true);
    h5::write_string_attr(file_, "source", schema.sources, false);
  }

  // Closes and removes the temporary file (a failed or abandoned conversion).
  void discard() {
    dataset_.reset();
    file_.reset();
    std::error_code ec;
    fs::remove(tmp_path_, ec);
  }

  std::string path_;
  std::string tmp_path_;
  std::int64_t tokens_ = 0;
  std::int64_t written_ = 0;
  h5::File file_;
  h5::Dataset dataset_;
  bool done_ = false;
};

// An input file opened for reading, its size checked up front.
class InputFile {
 public:
  explicit InputFile(std::string path) : path_(std::move(path)) {
    std::error_code ec;
    RT_REQUIRE(fs::exists(path_, ec), DataError, "{}: no such file", path_);
    RT_REQUIRE(!fs::is_directory(path_, ec), DataError, "{}: is a directory", path_);
    file_ = std::fopen(path_.c_str(), "rb");
    RT_REQUIRE(file_ != nullptr, DataError, "{}: cannot open: {}", path_, std::strerror(errno));
    const auto size = fs::file_size(path_, ec);
    RT_REQUIRE(!ec && size <= static_cast<std::uintmax_t>(INT64_MAX / 2), DataError, "{}: cannot read its size{}",
               path_, ec ? ": " + ec.message() : "");
    size_ = static_cast<std::int64_t>(size);
  }
  ~InputFile() {
    if (file_) std::fclose(file_);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  std::int64_t size() const { return size_; }

  // Exactly n bytes from the current position.
  void read(std::byte* out, std::int64_t n) {
    const std::size_t got = std::fread(out, 1, static_cast<std::size_t>(n), file_);
    RT_REQUIRE(got == static_cast<std::size_t>(n), DataError, "{}: {} (it shrank while being read?)", path_,
               std::ferror(file_) ? std::string("read failed: ") + std::strerror(errno) : "unexpected end of file");
  }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::int64_t size_ = 0;
};

std::string which_inputs(const std::vector<std::string>& paths) {
  return paths.size() == 1 ? paths.front() : fmt::format("{} (and {} more files)", paths.front(), paths.size() - 1);
}

// One --tokens input: where its tokens start and how many there are, of which type.
struct TokenInput {
  std::string path;
  std::int64_t offset = 0;  // bytes before the first token
  std::int64_t tokens = 0;
  SampleType type = SampleType::u16;
};

TokenInput inspect_token_input(const std::string& path, const TokensConvertOptions& o) {
  InputFile in(path);
  std::array<std::int32_t, 256> header{};
  const std::int64_t head = std::min<std::int64_t>(in.size(), kLlmcHeaderBytes);
  in.read(reinterpret_cast<std::byte*>(header.data()), head);
  const bool llmc = o.format == TokenFileFormat::llmc ||
                    (o.format == TokenFileFormat::automatic && head >= 4 && header[0] == kLlmcMagic);
  TokenInput t;
  t.path = path;
  if (llmc) {
    RT_REQUIRE(in.size() >= kLlmcHeaderBytes, DataError,
               "{}: bad llm.c header: the file has {} bytes, fewer than the {}-byte header", path, in.size(),
               kLlmcHeaderBytes);
    RT_REQUIRE(header[0] == kLlmcMagic, DataError, "{}: bad llm.c header: magic {}, expected {}", path, header[0],
               kLlmcMagic);
    RT_REQUIRE(header[1] == kLlmcVersion, DataError, "{}: bad llm.c header: version {}, expected {} (uint16 tokens)",
               path, header[1], kLlmcVersion);
    RT_REQUIRE(header[2] >= 0, DataError, "{}: bad llm.c header: token count {}", path, header[2]);
    const std::int64_t follow = in.size() - kLlmcHeaderBytes;
    RT_REQUIRE(follow == std::int64_t{2} * header[2], DataError,
               "{}: bad llm.c header: it says {} tokens ({} bytes) but {} bytes follow it", path, header[2],
               std::int64_t{2} * header[2], follow);
    RT_REQUIRE(!o.dtype || *o.dtype == SampleType::u16, DataError,
               "{}: an llm.c shard holds uint16 tokens, not --dtype {} (files of different dtypes)", path,
               sample_type_name(*o.dtype));
    t.offset = kLlmcHeaderBytes;
    t.tokens = header[2];
    t.type = SampleType::u16;
    return t;
  }
  RT_REQUIRE(o.dtype.has_value(), DataError, "{}: a raw token file needs --dtype (uint8, uint16 or uint32)", path);
  const auto tb = static_cast<std::int64_t>(sample_type_size(*o.dtype));
  RT_REQUIRE(in.size() % tb == 0, DataError, "{}: {} bytes is not a whole number of {} tokens", path, in.size(),
             sample_type_name(*o.dtype));
  t.tokens = in.size() / tb;
  t.type = *o.dtype;
  return t;
}

}  // namespace

TextConvertResult convert_text_to_tokens(const TextConvertOptions& o) {
  RT_REQUIRE(!o.inputs.empty(), DataError, "no text files given");
  RT_REQUIRE(o.val_fraction >= 0.0 && o.val_fraction < 1.0, DataError, "--val-fraction must be in [0, 1), got {}",
             o.val_fraction);
  const std::vector<std::string> paths = data::expand_sources(o.inputs);
  std::vector<std::unique_ptr<InputFile>> inputs;
  std::int64_t total = 0;
  for (const auto& p : paths) {
    inputs.push_back(std::make_unique<InputFile>(p));
    total += inputs.back()->size();
  }
  RT_REQUIRE(total > 0, DataError, "{}: empty text (0 bytes)", which_inputs(paths));
  const auto val = static_cast<std::int64_t>(static_cast<double>(total) * o.val_fraction);
  RT_REQUIRE(o.val_fraction == 0.0 || val > 0, DataError,
             "{}: --val-fraction {} of {} bytes holds no byte; give more text or --val-fraction 0", which_inputs(paths),
             o.val_fraction, total);
  const std::int64_t train = total - val;

  const std::string train_path = output_file((fs::path(o.out_dir) / "train.h5").string());
  const std::string val_path = output_file((fs::path(o.out_dir) / "val.h5").string());
  require_output_is_not_an_input(train_path, paths);
  if (val > 0) require_output_is_not_an_input(val_path, paths);
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  RT_REQUIRE(!ec, IoError, "{}: cannot create the directory: {}", o.out_dir, ec.message());
  const TokenFileWriter::Schema schema{SampleType::u8, 256, "byte", paths, o.chunk_tokens};
  TokenFileWriter train_out(train_path, train, schema);
  std::optional<TokenFileWriter> val_out;
  if (val > 0) val_out.emplace(val_path, val, schema);

  std::vector<std::byte> buffer(kReadBytes);
  std::int64_t at = 0;  // bytes of the concatenated text done
  for (auto& in : inputs) {
    for (std::int64_t done = 0; done < in->size();) {
      const std::int64_t n = std::min<std::int64_t>(static_cast<std::int64_t>(buffer.size()), in->size() - done);
      in->read(buffer.data(), n);
      const std::int64_t to_train = std::clamp<std::int64_t>(train - at, 0, n);
      train_out.append(buffer.data(), to_train, SampleType::u8);
      if (val_out) val_out->append(buffer.data() + to_train, n - to_train, SampleType::u8);
      done += n;
      at += n;
    }
  }
  TextConvertResult result;
  result.train = train_out.finish();
  if (val_out) result.val = val_out->finish();
  return result;
}

namespace {
constexpr NameTable<TokenFileFormat> kTokenFileFormats[] = {
    {"auto", TokenFileFormat::automatic}, {"raw", TokenFileFormat::raw}, {"llmc", TokenFileFormat::llmc}};
}  // namespace

std::optional<TokenFileFormat> token_file_format_from_name(const std::string& name) {
  return value_of_name(kTokenFileFormats, name);
}
std::vector<std::string> token_file_format_names() { return names_of(kTokenFileFormats); }

TokenFileWritten convert_token_files(const TokensConvertOptions& o) {
  RT_REQUIRE(!o.inputs.empty(), DataError, "no token files given");
  RT_REQUIRE(o.vocab_size >= 1 && o.vocab_size <= kMaxVocabSize, DataError, "--vocab must be in [1, {}], got {}",
             kMaxVocabSize, o.vocab_size);
  RT_REQUIRE(!o.dtype || token_type_from_name(std::string(sample_type_name(*o.dtype))), DataError,
             "--dtype must be uint8, uint16 or uint32, got {}", sample_type_name(*o.dtype));
  RT_REQUIRE(!o.tokenizer.empty(), DataError, "--tokenizer must not be empty");
  const std::vector<std::string> paths = data::expand_sources(o.inputs);
  std::vector<TokenInput> inputs;
  std::int64_t total = 0;
  for (const auto& p : paths) {
    inputs.push_back(inspect_token_input(p, o));
    total += inputs.back().tokens;
  }
  RT_REQUIRE(total > 0, DataError, "{}: no tokens (0 tokens)", which_inputs(paths));

  const std::string output_path = output_file(o.output_path);
  require_output_is_not_an_input(output_path, paths);
  const TokenFileWriter::Schema schema{token_type_for_vocab(o.vocab_size), o.vocab_size, o.tokenizer, paths,
                                       o.chunk_tokens};
  TokenFileWriter out(output_path, total, schema);
  std::vector<std::byte> buffer(kReadBytes);
  for (const TokenInput& t : inputs) {
    InputFile in(t.path);
    std::vector<std::byte> skip(static_cast<std::size_t>(t.offset));
    in.read(skip.data(), t.offset);
    const auto tb = static_cast<std::int64_t>(sample_type_size(t.type));
    const std::int64_t per_read = static_cast<std::int64_t>(buffer.size()) / tb;
    for (std::int64_t done = 0; done < t.tokens;) {
      const std::int64_t n = std::min(per_read, t.tokens - done);
      in.read(buffer.data(), n * tb);
      const std::int64_t bad = data::first_outside_vocab(t.type, buffer.data(), n, o.vocab_size);
      RT_REQUIRE(bad < 0, DataError, "{}: token {} at index {} is >= the vocabulary size {} (--vocab)", t.path,
                 data::token_at(t.type, buffer.data(), bad), done + bad, o.vocab_size);
      out.append(buffer.data(), n, t.type);
      done += n;
    }
  }
  return out.finish();
}

}  // namespace ringtrain
