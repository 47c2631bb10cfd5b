// Token datasets for language models: HDF5 files that each hold a 1-D unsigned integer
// `tokens` dataset (uint8, uint16 or uint32) with attributes `vocab_size` and `tokenizer`; the
// token stream runs through the files in order and is cut into windows of block_size + 1 tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ringtrain/data/dataset.hpp"

namespace ringtrain {

class Context;

// The schema's name and version, written as the file's `format` and `format_version`
// attributes (readers accept files without them, as made by other tools).
inline constexpr const char* kTokenFormatName = "ringtrain-tokens";
inline constexpr std::int32_t kTokenFormatVersion = 1;

// Largest vocabulary: every token must fit an int32 in the batches.
inline constexpr std::int64_t kMaxVocabSize = std::int64_t{1} << 31;

// The on-disk type for a vocabulary: uint8 up to 256 tokens, uint16 up to 65536, else uint32.
SampleType token_type_for_vocab(std::int64_t vocab_size);
// "uint8", "uint16", "uint32" -> the token type; nothing for any other name.
std::optional<SampleType> token_type_from_name(const std::string& name);

// Window w is tokens [w * block_size, w * block_size + block_size + 1): its first block_size
// tokens are the inputs, its last block_size the next-token targets (so a window's last target
// is the next window's first input). A stream of n tokens holds (n - 1) / block_size windows.
inline std::int64_t token_windows(std::int64_t tokens, std::int64_t block_size) {
  return tokens > 0 && block_size > 0 ? (tokens - 1) / block_size : 0;
}

struct TokenDatasetSpec {
  // Files or glob patterns (a pattern expands to its matches, sorted); their tokens are
  // concatenated in this order (a window may span two files).
  std::vector<std::string> sources;
  std::string tokens_key = "tokens";
  std::int64_t block_size = 0;  // tokens per input window (> 0)
  // memory: every rank reads 1/W of the tokens once into one copy per node, checking each
  // against the vocabulary. stream: each window's tokens are read (and checked) when a batch
  // needs them, one read per window.
  ReadStrategy strategy = ReadStrategy::memory;
  // Most bytes one read moves when the memory strategy loads the files.
  std::int64_t read_block_bytes = std::int64_t{64} << 20;
};

struct TokenFile {
  std::string path;
  std::int64_t first = 0;  // global index of its first token
  std::int64_t tokens = 0;
  FileStamp stamp;
};

class TokenDataset {
 public:
  // Collective over ctx's world (every rank passes the same spec). Checks every file on every
  // rank (schema, attributes, agreement of dtype, vocabulary and tokenizer between files, at
  // least one window); the memory strategy also reads and checks all tokens. Every rank gets
  // the same one-line DataError naming the file.
  static std::shared_ptr<const TokenDataset> open(const Context& ctx, const TokenDatasetSpec& spec);
  ~TokenDataset();
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;

  const TokenDatasetSpec& spec() const { return spec_; }
  const std::vector<TokenFile>& files() const { return files_; }
  std::int64_t size() const { return size_; }  // tokens
  std::int64_t block_size() const { return spec_.block_size; }
  std::int64_t windows() const { return token_windows(size_, spec_.block_size); }
  std::int64_t vocab_size() const { return vocab_size_; }
  const std::string& tokenizer() const { return tokenizer_; }
  SampleType token_type() const { return token_type_; }  // u8, u16 or u32

  // Memory strategy only: the node's copy of all tokens (token_type elements, native order).
  const std::byte* resident_tokens() const;

  struct Resident;  // the node-shared copy (memory strategy)

 private:
  TokenDataset() = default;
  friend class TokenDatasetOpener;

  TokenDatasetSpec spec_;
  std::vector<TokenFile> files_;
  std::int64_t size_ = 0;
  std::int64_t vocab_size_ = 0;
  std::string tokenizer_;
  SampleType token_type_ = SampleType::u16;
  std::unique_ptr<Resident> resident_;
};

}  // namespace ringtrain
