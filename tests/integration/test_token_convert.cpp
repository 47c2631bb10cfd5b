// `ringtrain data convert --text` and `--tokens` through the real executable, on 1 and 2 ranks:
// what a good conversion prints and writes, and that each bad input (converter errors and
// command-line mistakes) ends with exactly one "ringtrain: error:" line naming the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <vector>

#include "integration/run_command.hpp"

namespace ringtrain::test {
namespace {

namespace fs = std::filesystem;

const fs::path& work_dir() {
  static const fs::path dir = fresh_temp_dir("ringtrain-token-convert");
  return dir;
}

std::string write_bytes(const std::string& name, const std::string& bytes) {
  const auto path = work_dir() / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

// An llm.c shard of n uint16 tokens (value i % 50000), with the header's fields as given.
std::string llmc_shard(std::int32_t magic, std::int32_t tokens_in_header, int n) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = magic;
  header[1] = 1;
  header[2] = tokens_in_header;
  std::string bytes(header.size() * 4, '\0');
  std::memcpy(bytes.data(), header.data(), bytes.size());
  for (int i = 0; i < n; ++i) {
    const auto v = static_cast<std::uint16_t>(i % 50000);
    bytes.append(reinterpret_cast<const char*>(&v), 2);
  }
  return bytes;
}

class TokenConvertCli : public ::testing::TestWithParam<int> {};

TEST_P(TokenConvertCli, TextAndLlmcShardsConvert) {
  const fs::path out = work_dir() / ("text-" + std::to_string(GetParam()));
  const std::string text = write_bytes("story.txt", std::string(900, 'a') + "ünïcödé ✓\n");
  auto r = run_ringtrain(GetParam(), {"data", "convert", "--text", text, "--out-dir", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("train.h5: 825 tokens (uint8, vocabulary 256, tokenizer 'byte')"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("val.h5: 91 tokens"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(out / "train.h5"));
  EXPECT_TRUE(fs::exists(out / "val.h5"));

  const std::string shard = write_bytes("shard.bin", llmc_shard(20240520, 1000, 1000));
  const std::string h5 = (work_dir() / ("shard-" + std::to_string(GetParam()) + ".h5")).string();
  r = run_ringtrain(GetParam(),
                    {"data", "convert", "--tokens", shard, "--vocab", "50257", "--tokenizer", "gpt2", "-o", h5});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1000 tokens (uint16, vocabulary 50257, tokenizer 'gpt2')"), std::string::npos) << r.output;
}

struct Case {
  std::string name;
  std::vector<std::string> args;
  std::vector<std::string> expected;  // substrings of the error line
  int exit_code = 1;
};

TEST_P(TokenConvertCli, EveryBadInputGivesOneClearLine) {
  const std::string out = (work_dir() / "bad.h5").string();
  const std::string dir = (work_dir() / "bad-dir").string();
  std::string big;
  for (const std::uint16_t v : {std::uint16_t{5}, std::uint16_t{70}}) big.append(reinterpret_cast<const char*>(&v), 2);
  const std::vector<Case> cases = {
      {"empty text", {"--text", write_bytes("empty.txt", ""), "--out-dir", dir}, {"empty.txt: empty text (0 bytes)"}},
      {"no text file", {"--text", (work_dir() / "nope.txt").string(), "--out-dir", dir}, {"nope.txt: no such file"}},
      {"token >= vocabulary",
       {"--tokens", write_bytes("big.bin", big), "--dtype", "uint16", "--vocab", "64", "-o", out},
       {"big.bin: token 70 at index 1 is >= the vocabulary size 64"}},
      {"bad llm.c magic",
       {"--tokens", write_bytes("magic.bin", llmc_shard(123, 10, 10)), "--format", "llmc", "--vocab", "50257", "-o",
        out},
       {"magic.bin: bad llm.c header: magic 123, expected 20240520"}},
      {"llm.c token count",
       {"--tokens", write_bytes("count.bin", llmc_shard(20240520, 11, 10)), "--vocab", "50257", "-o", out},
       {"count.bin: bad llm.c header: it says 11 tokens (22 bytes) but 20 bytes follow it"}},
      {"different dtypes",
       {"--tokens", write_bytes("dtype.bin", llmc_shard(20240520, 10, 10)), "--dtype", "uint32", "--vocab", "50257",
        "-o", out},
       {"dtype.bin: an llm.c shard holds uint16 tokens, not --dtype uint32"}},
      {"raw without dtype",
       {"--tokens", write_bytes("raw.bin", "abcd"), "--vocab", "256", "-o", out},
       {"raw.bin: a raw token file needs --dtype"}},
      {"two input kinds", {"--text", "a.txt", "--tokens", "b.bin"}, {"give one input kind", "--help"}},
      {"no input", {"-o", out}, {"give one input kind"}},
      {"tokens without vocab", {"--tokens", "b.bin", "-o", out}, {"--vocab (with --tokens) is required"}},
      {"text without out dir", {"--text", "a.txt"}, {"--out-dir (with --text) is required"}},
      {"val fraction out of range",
       {"--text", "a.txt", "--out-dir", dir, "--val-fraction", "1"},
       {"--val-fraction: 1 would hold out every byte (must be below 1)"}},
      {"bad dtype", {"--tokens", "b.bin", "--dtype", "int16", "--vocab", "5", "-o", out}, {"--dtype", "int16"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name + " on " + std::to_string(GetParam()) + " rank(s)");
    std::vector<std::string> args = {"data", "convert"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto r = run_ringtrain(GetParam(), args, 60);
    EXPECT_EQ(r.exit_code, c.exit_code) << r.output;
    const auto errors = error_lines(r.output);
    ASSERT_EQ(errors.size(), 1u) << r.output;
    for (const auto& e : c.expected)
      EXPECT_NE(errors[0].find(e), std::string::npos) << "missing '" << e << "' in: " << errors[0];
    EXPECT_FALSE(fs::exists(out)) << "a failed conversion leaves no output";
    EXPECT_FALSE(fs::exists(out + ".tmp"));
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, TokenConvertCli, ::testing::Values(1, 2));

}  // namespace
}  // namespace ringtrain::test
