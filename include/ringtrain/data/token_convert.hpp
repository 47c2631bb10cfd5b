// `ringtrain data convert --text` and `--tokens`: text through the byte tokenizer, or token
// files made elsewhere (raw little-endian arrays, llm.c shards), to token dataset files (see
// tokens.hpp for the schema). Streamed: inputs of any size pass through a bounded buffer.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ringtrain/data/dataset.hpp"

namespace ringtrain {

// llm.c's shard header: 256 little-endian int32, [0] = magic, [1] = version, [2] = tokens;
// uint16 tokens follow.
inline constexpr std::int32_t kLlmcMagic = 20240520;
inline constexpr std::int32_t kLlmcVersion = 1;
inline constexpr std::int64_t kLlmcHeaderBytes = std::int64_t{256} * 4;

struct TextConvertOptions {
  std::vector<std::string> inputs;  // files or globs, concatenated in this order
  std::string out_dir;              // gets train.h5 and val.h5 (created if missing)
  // The last fraction of the bytes (rounded down) goes to val.h5, in [0, 1); 0: no val.h5.
  double val_fraction = 0.1;
  std::int64_t chunk_tokens = std::int64_t{1} << 20;  // tokens per HDF5 chunk
};

struct TokenFileWritten {
  std::string path;
  std::int64_t tokens = 0;
};

struct TextConvertResult {
  TokenFileWritten train;
  std::optional<TokenFileWritten> val;
};

// The byte tokenizer: token = byte (vocabulary 256, tokenizer "byte"), so decoding is exact
// for any UTF-8 (or any bytes at all). DataError for no input, empty text, a val fraction
// that holds no byte.
TextConvertResult convert_text_to_tokens(const TextConvertOptions& options);

// How --tokens inputs are read. automatic: an llm.c shard when the file starts with the llm.c
// magic, else raw.
enum class TokenFileFormat : std::uint8_t { automatic, raw, llmc };
std::optional<TokenFileFormat> token_file_format_from_name(const std::string& name);
std::vector<std::string> token_file_format_names();  // auto, raw, llmc: what token_file_format_from_name knows

struct TokensConvertOptions {
  std::vector<std::string> inputs;  // files or globs, concatenated in this order
  std::string output_path;
  // Element type of raw inputs (uint8, uint16, uint32 little-endian); llm.c shards are uint16
  // (when given, it must agree). Required for raw inputs.
  std::optional<SampleType> dtype;
  std::int64_t vocab_size = 0;  // every token must be below it; the output's dtype follows it
  std::string tokenizer = "external";
  TokenFileFormat format = TokenFileFormat::automatic;
  std::int64_t chunk_tokens = std::int64_t{1} << 20;
};

// DataError naming the file for: a token >= vocab_size (with its index), a raw file that is
// not a whole number of tokens, files of different dtypes, an llm.c header with a bad magic or
// version or a token count that disagrees with the file's size, no tokens at all.
TokenFileWritten convert_token_files(const TokensConvertOptions& options);

}  // namespace ringtrain
