// TokenDataset and TokenLoader in one process: windows and their shifted targets (also across
// file boundaries), the same batches from the memory and stream strategies and with or without
// prefetch, ranks of larger worlds simulated (their batches tile the one-rank batch),
// evaluation order, a resumed start, and each malformed file's one-line error.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "ringtrain/data/token_loader.hpp"
#include "ringtrain/data/tokens.hpp"
#include "support/test_context.hpp"
#include "unit/data/token_files.hpp"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::token_of;
using test::tokens_from;
using test::write_token_file;

constexpr std::int64_t kVocab = 300;

std::shared_ptr<const TokenDataset> open_tokens(const std::vector<std::string>& sources, std::int64_t block_size,
                                                ReadStrategy strategy = ReadStrategy::memory) {
  TokenDatasetSpec spec;
  spec.sources = sources;
  spec.block_size = block_size;
  spec.strategy = strategy;
  spec.read_block_bytes = 100;  // several reads per file
  return TokenDataset::open(test::context(), spec);
}

// Every window of the batch holds tokens [w*T, w*T + T) as inputs and [w*T + 1, w*T + T + 1)
// as targets of the stream token_of(i).
void expect_windows(const TokenBatch& b, std::int64_t t) {
  ASSERT_EQ(b.inputs.shape(), (Shape{b.size(), t}));
  ASSERT_EQ(b.targets.shape(), (Shape{b.size(), t}));
  ASSERT_EQ(b.inputs.dtype(), DType::i32);
  for (std::int64_t i = 0; i < b.size(); ++i) {
    const std::int64_t w = b.windows[static_cast<std::size_t>(i)];
    for (std::int64_t j = 0; j < t; ++j) {
      ASSERT_EQ(b.inputs.data<std::int32_t>()[i * t + j], static_cast<std::int32_t>(token_of(w * t + j, kVocab)))
          << "window " << w << " input " << j;
      ASSERT_EQ(b.targets.data<std::int32_t>()[i * t + j], static_cast<std::int32_t>(token_of(w * t + j + 1, kVocab)))
          << "window " << w << " target " << j;
    }
  }
}

// The windows of every batch of `epochs` epochs, batch after batch.
std::vector<std::vector<std::int64_t>> all_batches(std::shared_ptr<const TokenDataset> data,
                                                   const TokenLoaderOptions& o) {
  TokenLoader loader(std::move(data), o);
  std::vector<std::vector<std::int64_t>> out;
  for (std::int64_t i = 0; i < loader.steps_per_epoch() * (o.epochs - o.start_epoch) - o.start_step; ++i)
    out.push_back(loader.next().windows);
  return out;
}

class TokenData : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::temp_dir(std::string("token-data-") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    // 1000 tokens in three files of different sizes (windows span the boundaries).
    write_token_file(path("a.h5"), tokens_from(0, 333, kVocab));
    write_token_file(path("b.h5"), tokens_from(333, 400, kVocab), {.chunk = 0});
    write_token_file(path("c.h5"), tokens_from(733, 267, kVocab));
    files_ = {path("a.h5"), path("b.h5"), path("c.h5")};
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
  std::vector<std::string> files_;
};

TEST_F(TokenData, OpensTheSchemaAndCountsWindows) {
  const auto ds = open_tokens(files_, 16);
  EXPECT_EQ(ds->size(), 1000);
  EXPECT_EQ(ds->windows(), (1000 - 1) / 16);
  EXPECT_EQ(ds->vocab_size(), kVocab);
  EXPECT_EQ(ds->tokenizer(), "test");
  EXPECT_EQ(ds->token_type(), SampleType::u16);
  ASSERT_EQ(ds->files().size(), 3u);
  EXPECT_EQ(ds->files()[1].first, 333);
  EXPECT_EQ(ds->files()[2].tokens, 267);
  EXPECT_EQ(token_windows(17, 16), 1);
  EXPECT_EQ(token_windows(16, 16), 0);
  EXPECT_EQ(token_type_for_vocab(256), SampleType::u8);
  EXPECT_EQ(token_type_for_vocab(257), SampleType::u16);
  EXPECT_EQ(token_type_for_vocab(65537), SampleType::u32);
}

TEST_F(TokenData, BatchesHoldWindowsAndShiftedTargetsWithEitherStrategy) {
  for (const ReadStrategy st : {ReadStrategy::memory, ReadStrategy::stream}) {
    SCOPED_TRACE(read_strategy_name(st));
    const auto ds = open_tokens(files_, 16, st);
    TokenLoaderOptions o;
    o.batch_size = 5;
    o.epochs = 2;
    o.seed = 3;
    TokenLoader loader(ds, o);
    EXPECT_EQ(loader.steps_per_epoch(), ds->windows() / 5);
    std::vector<std::int64_t> seen;
    for (std::int64_t s = 0; s < loader.steps_per_epoch(); ++s) {
      const TokenBatch& b = loader.next();
      EXPECT_EQ(b.epoch, 0);
      EXPECT_EQ(b.step, s);
      expect_windows(b, 16);
      seen.insert(seen.end(), b.windows.begin(), b.windows.end());
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "a window twice in one epoch";
    EXPECT_EQ(loader.next().epoch, 1);
  }
}

TEST_F(TokenData, StrategiesPrefetchAndWorldSizesGiveTheSameGlobalBatches) {
  TokenLoaderOptions o;
  o.batch_size = 12;
  o.epochs = 2;
  o.seed = 11;
  const auto one = all_batches(open_tokens(files_, 8), o);
  ASSERT_FALSE(one.empty());
  for (const ReadStrategy st : {ReadStrategy::memory, ReadStrategy::stream}) {
    const auto ds = open_tokens(files_, 8, st);
    for (const int prefetch : {0, 3}) {
      o.prefetch = prefetch;
      o.world_size = 1;
      o.rank = 0;
      o.batch_size = 12;
      EXPECT_EQ(all_batches(ds, o), one) << read_strategy_name(st) << ", prefetch " << prefetch;
      for (const int world : {2, 3, 4}) {
        SCOPED_TRACE(fmt::format("{} ranks, {}, prefetch {}", world, read_strategy_name(st), prefetch));
        o.world_size = world;
        o.batch_size = 12 / world;
        std::vector<std::vector<std::int64_t>> joined(one.size());
        for (int r = 0; r < world; ++r) {
          o.rank = r;
          const auto mine = all_batches(ds, o);
          ASSERT_EQ(mine.size(), one.size());
          for (std::size_t s = 0; s < mine.size(); ++s)
            joined[s].insert(joined[s].end(), mine[s].begin(), mine[s].end());
        }
        EXPECT_EQ(joined, one) << "rank r holds the r-th slice of the global batch";
      }
    }
  }
}

TEST_F(TokenData, EvaluationCoversEveryWindowInOrderAndResumeStartsMidEpoch) {
  const auto ds = open_tokens(files_, 10, ReadStrategy::stream);
  TokenLoaderOptions o;
  o.training = false;
  o.batch_size = 7;
  o.world_size = 2;
  std::vector<std::int64_t> windows;
  for (int r = 0; r < 2; ++r) {
    o.rank = r;
    TokenLoader loader(ds, o);
    for (std::int64_t s = 0; s < loader.steps_per_epoch(); ++s) {
      const TokenBatch& b = loader.next();
      expect_windows(b, 10);
      windows.insert(windows.end(), b.windows.begin(), b.windows.end());
    }
  }
  std::vector<std::int64_t> all(static_cast<std::size_t>(ds->windows()));
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(windows, all);

  TokenLoaderOptions t;
  t.batch_size = 4;
  t.epochs = 2;
  const auto full = all_batches(ds, t);
  t.start_epoch = 0;
  t.start_step = 5;
  const auto resumed = all_batches(ds, t);
  EXPECT_EQ(resumed, std::vector(full.begin() + 5, full.end()));
}

TEST_F(TokenData, TokensOutsideTheVocabularyNameFileAndIndex) {
  auto tokens = tokens_from(0, 200, kVocab);
  tokens[123] = kVocab + 5;
  write_token_file(path("bad.h5"), tokens);
  EXPECT_EQ(error_of([&] { open_tokens({path("bad.h5")}, 8); }),
            path("bad.h5") + ": dataset 'tokens': token 305 at index 123 is >= vocab_size 300");
  // The stream strategy checks each window as it reads it.
  const auto ds = open_tokens({path("bad.h5")}, 8, ReadStrategy::stream);
  TokenLoaderOptions o;
  o.training = false;
  o.batch_size = 32;
  TokenLoader loader(ds, o);
  EXPECT_EQ(error_of([&] {
              for (std::int64_t s = 0; s < loader.steps_per_epoch(); ++s) loader.next();
            }),
            path("bad.h5") + ": dataset 'tokens': token 305 at index 123 is >= vocab_size 300");
}

TEST_F(TokenData, MalformedFilesGiveOneLineErrors) {
  const auto tokens = tokens_from(0, 100, kVocab);
  auto error_for = [&](const std::string& name, const test::TokenFileSpec& spec, std::int64_t block = 8) {
    write_token_file(path(name), tokens, spec);
    const std::string msg = error_of([&] { open_tokens({path(name)}, block, ReadStrategy::stream); });
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  };
  EXPECT_EQ(error_for("novocab.h5", {.vocab_size = -1}),
            path("novocab.h5") + ": dataset 'tokens' has no attribute 'vocab_size'");
  EXPECT_EQ(error_for("notok.h5", {.tokenizer = ""}),
            path("notok.h5") + ": dataset 'tokens' has no attribute 'tokenizer'");
  EXPECT_EQ(error_for("strvocab.h5", {.vocab_as_string = true}),
            path("strvocab.h5") + ": dataset 'tokens': attribute 'vocab_size' is not an integer");
  EXPECT_EQ(error_for("zerovocab.h5", {.vocab_size = 0}),
            path("zerovocab.h5") + ": dataset 'tokens': vocab_size 0 is outside [1, 2147483648]");
  EXPECT_EQ(error_for("signed.h5", {.file_type = H5T_STD_I32LE}),
            path("signed.h5") + ": dataset 'tokens' has dtype int32, expected uint8, uint16 or uint32");
  EXPECT_EQ(error_for("short.h5", {}, 100),
            path("short.h5") + ": 100 tokens are fewer than one window of block_size + 1 = 101 tokens");

  write_token_file(path("u8.h5"), tokens, {.file_type = H5T_STD_U8LE});
  write_token_file(path("u16.h5"), tokens);
  write_token_file(path("v301.h5"), tokens, {.vocab_size = 301});
  write_token_file(path("gpt2.h5"), tokens, {.tokenizer = "gpt2"});
  EXPECT_EQ(error_of([&] {
              open_tokens({path("u16.h5"), path("u8.h5")}, 8);
            }),
            path("u8.h5") + ": dataset 'tokens' holds uint8 tokens but " + path("u16.h5") + " holds uint16");
  EXPECT_EQ(error_of([&] {
              open_tokens({path("u16.h5"), path("v301.h5")}, 8);
            }),
            path("v301.h5") + ": vocab_size is 301 but " + path("u16.h5") + " has 300");
  EXPECT_EQ(error_of([&] {
              open_tokens({path("u16.h5"), path("gpt2.h5")}, 8);
            }),
            path("gpt2.h5") + ": tokenizer is 'gpt2' but " + path("u16.h5") + " has 'test'");
  EXPECT_EQ(error_of([&] {
              open_tokens({path("u16.h5"), path("u16.h5")}, 8);
            }),
            path("u16.h5") + ": listed more than once");
  EXPECT_EQ(error_of([&] {
              open_tokens({path("u16.h5"), path("u8.h5")}, 60);
            }),
            path("u8.h5") + ": dataset 'tokens' holds uint8 tokens but " + path("u16.h5") + " holds uint16");
  EXPECT_EQ(error_of([&] {
              open_tokens({path("u16.h5"), path("v301.h5")}, 200);
            }),
            path("v301.h5") + ": vocab_size is 301 but " + path("u16.h5") + " has 300");
  EXPECT_EQ(error_of([&] { open_tokens({path("u16.h5"), path("u16b.h5")}, 8); }), path("u16b.h5") + ": no such file");

  TokenLoaderOptions o;
  o.batch_size = 20;
  EXPECT_EQ(
      error_of([&] { TokenLoader loader(open_tokens({path("u16.h5")}, 8), o); }),
      path("u16.h5") +
          ": 12 windows of block_size + 1 = 9 tokens are fewer than one global batch of 20 (= world 1 x batch 20)");
}

TEST_F(TokenData, AnImageDatasetIsNotTokenData) {
  {
    h5::File f(RT_H5_CHECK(H5Fcreate(path("images.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)));
    h5::write_string_attr(f, "format", {"ringtrain-dataset"}, true);
  }
  EXPECT_EQ(error_of([&] { open_tokens({path("images.h5")}, 8); }),
            path("images.h5") + ": holds a 'ringtrain-dataset' file, not token data (format 'ringtrain-tokens')");
  { h5::File f(RT_H5_CHECK(H5Fcreate(path("none.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT))); }
  EXPECT_EQ(error_of([&] { open_tokens({path("none.h5")}, 8); }),
            path("none.h5") + ": dataset 'tokens' missing (found: nothing)");
}

}  // namespace
}  // namespace ringtrain
