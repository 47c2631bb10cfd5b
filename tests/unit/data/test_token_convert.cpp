// The token converters: UTF-8 text through the byte tokenizer and back, the val split's sizes,
// raw token arrays of each dtype, llm.c shards (good, bad magic, bad version, truncated, token
// count mismatch), the written schema, and each bad input's one-line error naming its file.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "hdf5/h5_attributes.hpp"
#include "ringtrain/data/token_convert.hpp"
#include "ringtrain/data/tokens.hpp"
#include "support/test_context.hpp"
#include "unit/data/token_files.hpp"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::little_endian_bytes;
using test::llmc_shard;
using test::tokens_from;
using test::write_file;

struct ReadTokens {
  std::vector<std::uint32_t> tokens;
  std::string dtype;  // "uint8", ...
  std::int64_t vocab_size = 0;
  std::string tokenizer;
  std::string format;
  hsize_t chunk = 0;
};

ReadTokens read_tokens(const fs::path& path) {
  ReadTokens r;
  h5::ErrorContext where(path.string());
  h5::File f(RT_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)));
  h5::Dataset d(RT_H5_CHECK(H5Dopen2(f, "tokens", H5P_DEFAULT)));
  h5::Dataspace space(RT_H5_CHECK(H5Dget_space(d)));
  hsize_t n = 0;
  EXPECT_EQ(H5Sget_simple_extent_ndims(space), 1);
  RT_H5_CHECK(H5Sget_simple_extent_dims(space, &n, nullptr));
  r.tokens.resize(n);
  if (n > 0) RT_H5_CHECK(H5Dread(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, r.tokens.data()));
  h5::Datatype type(RT_H5_CHECK(H5Dget_type(d)));
  for (const auto& [t, name] :
       {std::pair{H5T_STD_U8LE, "uint8"}, std::pair{H5T_STD_U16LE, "uint16"}, std::pair{H5T_STD_U32LE, "uint32"}})
    if (H5Tequal(type, t) > 0) r.dtype = name;
  r.vocab_size = h5::read_attr<std::int64_t>(d, "vocab_size");
  r.tokenizer = h5::read_string_attr(d, "tokenizer");
  r.format = h5::read_string_attr(f, "format");
  h5::PropList dcpl(RT_H5_CHECK(H5Dget_create_plist(d)));
  if (H5Pget_layout(dcpl) == H5D_CHUNKED) RT_H5_CHECK(H5Pget_chunk(dcpl, 1, &r.chunk));
  return r;
}

std::string decode_bytes(const std::vector<std::uint32_t>& tokens) {
  std::string s;
  for (const auto t : tokens) s.push_back(static_cast<char>(t));
  return s;
}

class TokenConvert : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        test::temp_dir(std::string("token-convert-") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string text_file(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }
  fs::path dir_;
};

TEST_F(TokenConvert, ByteTokenizerRoundTripsUtf8AndHoldsOutTheLastBytes) {
  const std::string a = "Grüße, 世界! ¿Qué tal? 🙂 naïve café\n";
  const std::string b = "Ελληνικά, русский, עברית, العربية.\n";
  TextConvertOptions o;
  o.inputs = {text_file("a.txt", a), text_file("b.txt", b)};
  o.out_dir = path("out");  // created
  o.val_fraction = 0.25;
  o.chunk_tokens = 16;
  const TextConvertResult r = convert_text_to_tokens(o);
  const std::string all = a + b;
  const auto val = static_cast<std::int64_t>(static_cast<double>(all.size()) * 0.25);
  ASSERT_TRUE(r.val.has_value());
  EXPECT_EQ(r.train.tokens, static_cast<std::int64_t>(all.size()) - val);
  EXPECT_EQ(r.val->tokens, val);
  EXPECT_EQ(r.train.path, path("out/train.h5"));
  EXPECT_EQ(r.val->path, path("out/val.h5"));

  const ReadTokens train = read_tokens(r.train.path);
  const ReadTokens held = read_tokens(r.val->path);
  EXPECT_EQ(decode_bytes(train.tokens) + decode_bytes(held.tokens), all) << "decoding is exact";
  EXPECT_EQ(decode_bytes(held.tokens), all.substr(all.size() - static_cast<std::size_t>(val)));
  for (const ReadTokens* t : {&train, &held}) {
    EXPECT_EQ(t->dtype, "uint8");
    EXPECT_EQ(t->vocab_size, 256);
    EXPECT_EQ(t->tokenizer, "byte");
    EXPECT_EQ(t->format, kTokenFormatName);
  }
  EXPECT_EQ(train.chunk, 16u);
  EXPECT_FALSE(fs::exists(path("out/train.h5.tmp")));
}

TEST_F(TokenConvert, ValSplitSizesRoundDown) {
  const std::string text(1000, 'x');
  for (const auto& [fraction, val] :
       {std::pair{0.1, 100}, std::pair{0.0, 0}, std::pair{0.333, 333}, std::pair{0.9, 900}, std::pair{0.0015, 1}}) {
    SCOPED_TRACE(fraction);
    TextConvertOptions o;
    o.inputs = {text_file("x.txt", text)};
    o.out_dir = path(fmt::format("out-{}", fraction));
    o.val_fraction = fraction;
    const TextConvertResult r = convert_text_to_tokens(o);
    EXPECT_EQ(r.train.tokens, 1000 - val);
    EXPECT_EQ(r.val.has_value(), val > 0);
    if (r.val) EXPECT_EQ(r.val->tokens, val);
    EXPECT_EQ(fs::exists(path(fmt::format("out-{}/val.h5", fraction))), val > 0);
  }
}

TEST_F(TokenConvert, TextGlobsExpandSortedAndConcatenateInOrder) {
  text_file("part-2.txt", "BB");
  text_file("part-1.txt", "A");
  TextConvertOptions o;
  o.inputs = {path("part-*.txt"), text_file("z.txt", "c")};
  o.out_dir = path("out");
  o.val_fraction = 0.0;
  const TextConvertResult r = convert_text_to_tokens(o);
  EXPECT_EQ(decode_bytes(read_tokens(r.train.path).tokens), "ABBc");
}

TEST_F(TokenConvert, TextErrors) {
  TextConvertOptions o;
  o.out_dir = path("out");
  o.inputs = {text_file("empty.txt", "")};
  EXPECT_EQ(error_of([&] { convert_text_to_tokens(o); }), path("empty.txt") + ": empty text (0 bytes)");
  o.inputs = {text_file("tiny.txt", "abc")};
  o.val_fraction = 0.1;
  EXPECT_EQ(error_of([&] { convert_text_to_tokens(o); }),
            path("tiny.txt") + ": --val-fraction 0.1 of 3 bytes holds no byte; give more text or --val-fraction 0");
  o.inputs = {path("absent.txt")};
  EXPECT_EQ(error_of([&] { convert_text_to_tokens(o); }), path("absent.txt") + ": no such file");
  o.inputs = {path("nothing-*.txt")};
  EXPECT_EQ(error_of([&] { convert_text_to_tokens(o); }), path("nothing-*.txt") + ": no files match");
  o.inputs = {};
  EXPECT_EQ(error_of([&] { convert_text_to_tokens(o); }), "no text files given");
  EXPECT_FALSE(fs::exists(path("out/train.h5")));
  // An input where an output goes (a second conversion into the same directory, by a glob
  // that takes the outputs of the first): refused before anything is written.
  fs::create_directories(path("again"));
  const std::string old_train = text_file("again/train.h5", "the first conversion's file");
  o.out_dir = path("again");
  o.val_fraction = 0.0;
  o.inputs = {path("again/*")};
  EXPECT_EQ(error_of([&] { convert_text_to_tokens(o); }),
            old_train + ": the output is also an input (" + old_train +
                "); writing it would destroy what is read: choose another output");
  EXPECT_EQ(fs::file_size(old_train), 27u);
}

TEST_F(TokenConvert, RawArraysOfEachDtype) {
  const auto tokens = tokens_from(0, 1000, 50257);
  for (const auto& [dtype, bytes] : {std::pair{SampleType::u16, little_endian_bytes<std::uint16_t>(tokens)},
                                     std::pair{SampleType::u32, little_endian_bytes<std::uint32_t>(tokens)}}) {
    SCOPED_TRACE(sample_type_name(dtype));
    write_file(path("train.bin"), bytes);
    TokensConvertOptions o;
    o.inputs = {path("train.bin")};
    o.output_path = path("train.h5");
    o.dtype = dtype;
    o.vocab_size = 50257;
    o.tokenizer = "gpt2";
    EXPECT_EQ(convert_token_files(o).tokens, 1000);
    const ReadTokens r = read_tokens(o.output_path);
    EXPECT_EQ(r.tokens, tokens);
    EXPECT_EQ(r.dtype, "uint16") << "the vocabulary chooses the stored dtype";
    EXPECT_EQ(r.vocab_size, 50257);
    EXPECT_EQ(r.tokenizer, "gpt2");
  }
  const auto small = tokens_from(0, 100, 200);
  write_file(path("small.bin"), little_endian_bytes<std::uint8_t>(small));
  TokensConvertOptions o;
  o.inputs = {path("small.bin")};
  o.output_path = path("small.h5");
  o.dtype = SampleType::u8;
  o.vocab_size = 200;
  convert_token_files(o);
  const ReadTokens r = read_tokens(o.output_path);
  EXPECT_EQ(r.tokens, small);
  EXPECT_EQ(r.dtype, "uint8");
  EXPECT_EQ(r.tokenizer, "external");
  const auto big = tokens_from(0, 100, 100000);
  write_file(path("big.bin"), little_endian_bytes<std::uint32_t>(big));
  o.inputs = {path("big.bin")};
  o.output_path = path("big.h5");
  o.dtype = SampleType::u32;
  o.vocab_size = 100000;
  convert_token_files(o);
  EXPECT_EQ(read_tokens(o.output_path).dtype, "uint32");
  EXPECT_EQ(read_tokens(o.output_path).tokens, big);
}

TEST_F(TokenConvert, LlmcShardsConcatenateAfterTheirHeaders) {
  const auto first = tokens_from(0, 700, 50257);
  const auto second = tokens_from(700, 300, 50257);
  write_file(path("shard_000.bin"), llmc_shard(first));
  write_file(path("shard_001.bin"), llmc_shard(second));
  TokensConvertOptions o;
  o.inputs = {path("shard_*.bin")};
  o.output_path = path("fineweb.h5");
  o.vocab_size = 50257;  // no --dtype: llm.c shards are uint16
  o.tokenizer = "gpt2";
  EXPECT_EQ(convert_token_files(o).tokens, 1000);
  EXPECT_EQ(read_tokens(o.output_path).tokens, tokens_from(0, 1000, 50257));
  o.format = TokenFileFormat::llmc;
  o.dtype = SampleType::u16;
  EXPECT_EQ(convert_token_files(o).tokens, 1000) << "--dtype uint16 agrees with the shards";
  // Read as raw, the header's 1024 bytes become 512 more tokens.
  o.format = TokenFileFormat::raw;
  o.vocab_size = kMaxVocabSize;
  EXPECT_EQ(convert_token_files(o).tokens, 2 * 512 + 1000);
}

TEST_F(TokenConvert, LlmcHeaderErrors) {
  const auto tokens = tokens_from(0, 100, 50257);
  TokensConvertOptions o;
  o.output_path = path("out.h5");
  o.vocab_size = 50257;
  o.format = TokenFileFormat::llmc;
  auto error_for = [&](const std::string& name, const std::vector<std::byte>& bytes) {
    write_file(path(name), bytes);
    o.inputs = {path(name)};
    return error_of([&] { convert_token_files(o); });
  };
  EXPECT_EQ(error_for("magic.bin", llmc_shard(tokens, 20240521)),
            path("magic.bin") + ": bad llm.c header: magic 20240521, expected 20240520");
  EXPECT_EQ(error_for("version.bin", llmc_shard(tokens, 20240520, 7)),
            path("version.bin") + ": bad llm.c header: version 7, expected 1 (uint16 tokens)");
  auto truncated = llmc_shard(tokens);
  truncated.resize(500);
  EXPECT_EQ(error_for("short.bin", truncated),
            path("short.bin") + ": bad llm.c header: the file has 500 bytes, fewer than the 1024-byte header");
  auto cut = llmc_shard(tokens);
  cut.resize(cut.size() - 10);
  EXPECT_EQ(error_for("cut.bin", cut),
            path("cut.bin") + ": bad llm.c header: it says 100 tokens (200 bytes) but 190 bytes follow it");
  EXPECT_EQ(error_for("count.bin", llmc_shard(tokens, 20240520, 1, 120)),
            path("count.bin") + ": bad llm.c header: it says 120 tokens (240 bytes) but 200 bytes follow it");
  o.format = TokenFileFormat::automatic;
  o.dtype = SampleType::u32;
  EXPECT_EQ(error_for("dtype.bin", llmc_shard(tokens)),
            path("dtype.bin") + ": an llm.c shard holds uint16 tokens, not --dtype uint32 (files of different dtypes)");
  EXPECT_FALSE(fs::exists(o.output_path));
  EXPECT_FALSE(fs::exists(o.output_path + ".tmp"));
}

TEST_F(TokenConvert, TokenFileErrors) {
  TokensConvertOptions o;
  o.output_path = path("out.h5");
  o.vocab_size = 1000;
  o.dtype = SampleType::u16;
  auto tokens = tokens_from(0, 100, 1000);
  tokens[42] = 1000;
  write_file(path("over.bin"), little_endian_bytes<std::uint16_t>(tokens));
  o.inputs = {path("over.bin")};
  EXPECT_EQ(error_of([&] { convert_token_files(o); }),
            path("over.bin") + ": token 1000 at index 42 is >= the vocabulary size 1000 (--vocab)");
  EXPECT_FALSE(fs::exists(o.output_path + ".tmp")) << "a failed conversion leaves nothing behind";

  write_file(path("odd.bin"), std::vector<std::byte>(7));
  o.inputs = {path("odd.bin")};
  EXPECT_EQ(error_of([&] { convert_token_files(o); }),
            path("odd.bin") + ": 7 bytes is not a whole number of uint16 tokens");

  write_file(path("empty.bin"), {});
  o.inputs = {path("empty.bin")};
  EXPECT_EQ(error_of([&] { convert_token_files(o); }), path("empty.bin") + ": no tokens (0 tokens)");

  write_file(path("raw.bin"), little_endian_bytes<std::uint16_t>(tokens_from(0, 10, 1000)));
  o.inputs = {path("raw.bin")};
  o.dtype.reset();
  EXPECT_EQ(error_of([&] { convert_token_files(o); }),
            path("raw.bin") + ": a raw token file needs --dtype (uint8, uint16 or uint32)");

  o.dtype = SampleType::u16;
  o.vocab_size = 0;
  EXPECT_EQ(error_of([&] { convert_token_files(o); }), "--vocab must be in [1, 2147483648], got 0");
  o.vocab_size = 1000;
  o.output_path = path("./raw.bin");  // the input itself, by another name
  EXPECT_EQ(error_of([&] { convert_token_files(o); }),
            o.output_path + ": the output is also an input (" + path("raw.bin") +
                "); writing it would destroy what is read: choose another output");
  EXPECT_EQ(fs::file_size(path("raw.bin")), 20u);
  o.output_path = path("raw.bin/out.h5");  // under a file: no directory can be made
  EXPECT_NE(error_of([&] { convert_token_files(o); }).find(o.output_path + ": cannot create directory"),
            std::string::npos);
}

// The formats the CLI offers (data convert --format) are exactly those that parse, to distinct formats.
TEST(TokenFileFormatNames, EveryListedNameParsesToItsOwnFormat) {
  const std::vector<std::string> names = token_file_format_names();
  EXPECT_EQ(names, (std::vector<std::string>{"auto", "raw", "llmc"}));
  std::vector<TokenFileFormat> formats;
  for (const std::string& name : names) {
    const std::optional<TokenFileFormat> format = token_file_format_from_name(name);
    ASSERT_TRUE(format.has_value()) << name;
    EXPECT_EQ(std::count(formats.begin(), formats.end(), *format), 0) << name;
    formats.push_back(*format);
  }
  EXPECT_FALSE(token_file_format_from_name("automatic").has_value());
}

}  // namespace
}  // namespace ringtrain
