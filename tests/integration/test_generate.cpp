// `ringtrain generate` end to end, without mpirun, on a tiny GPT trained on byte tokens of a
// generated text: a seed fixes the text; the KV cache gives the tokens of full forwards
// (--no-kv-cache), greedy and sampled, past block_size and for a prompt longer than it; --json
// agrees with the text output; bad input is one error line.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "integration/run_command.hpp"
#include "integration/token_corpus.hpp"

namespace ringtrain::test {
namespace {

namespace fs = std::filesystem;

const fs::path& work_dir() {
  static const fs::path dir = fresh_temp_dir("ringtrain-generate");
  return dir;
}

CommandResult ringtrain(const std::vector<std::string>& args) {
  std::string cmd = "timeout -k 5 120 " + shell_quote(RINGTRAIN_EXE);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  return run_command(cmd);
}

// Trains `model` (TOML of the [model] table) for 20 steps on ~20 KB of numbered sentences;
// returns the checkpoint.
std::string train(const std::string& name, const std::string& model) {
  static const fs::path tokens = write_token_corpus(work_dir(), 20000);
  const fs::path config = work_dir() / (name + ".toml");
  std::ofstream(config) << "[data]\nformat = \"tokens\"\ntrain = \"" << (tokens / "train.h5").string()
                        << "\"\nblock_size = 32\n[model]\n"
                        << model << "[optim]\nname = \"adamw\"\nlr = 0.003\n[train]\nbatch_size = 8\nmax_steps = 20\n"
                        << "[run]\ndir = \"" << (work_dir() / name).string() << "\"\n";
  const auto r = ringtrain({"train", config.string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return (work_dir() / name / "checkpoints" / "ckpt-000000020.h5").string();
}

const std::string& gpt() {
  static const std::string path =
      train("gpt", "family = \"gpt\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nblock_size = 32\n");
  return path;
}

CommandResult generate(std::vector<std::string> args) {
  args.insert(args.begin(), {"generate", gpt()});
  return ringtrain(args);
}

nlohmann::json generate_json(std::vector<std::string> args) {
  args.emplace_back("--json");
  const auto r = generate(args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(r.output);
}

std::size_t error_lines(const std::string& output) {
  const auto lines = lines_of(output);
  return static_cast<std::size_t>(
      std::count_if(lines.begin(), lines.end(), [](const auto& l) { return l.find("ringtrain: error:") != l.npos; }));
}

TEST(Generate, SeedFixesTheText) {
  const std::vector<std::string> args = {"--prompt", "12: the", "--max-tokens", "60", "--seed", "7"};
  const auto a = generate(args);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output.rfind("12: the", 0), 0u) << a.output;
  EXPECT_GE(a.output.size(), std::string("12: the").size() + 60 + 1);
  EXPECT_EQ(generate(args).output, a.output);
  std::vector<std::string> other = args;
  other.back() = "8";
  EXPECT_NE(generate(other).output, a.output);
}

// 60 new tokens after a short prompt outgrow block_size = 32; a 40-byte prompt starts beyond it.
TEST(Generate, KvCacheGivesTheTokensOfFullForwards) {
  for (const std::string prompt : {"3: ring", "41: the ring passes gradients between ra"}) {
    for (const std::vector<std::string>& sampling :
         {std::vector<std::string>{"--temperature", "0"}, std::vector<std::string>{"--temperature", "1", "--seed", "3"},
          std::vector<std::string>{"--temperature", "0.8", "--top-k", "5", "--seed", "4"}}) {
      std::vector<std::string> args = {"--prompt", prompt, "--max-tokens", "60"};
      args.insert(args.end(), sampling.begin(), sampling.end());
      const auto cached = generate_json(args);
      args.emplace_back("--no-kv-cache");
      const auto full = generate_json(args);
      ASSERT_EQ(cached["tokens"].size(), 60u);
      EXPECT_EQ(cached["tokens"], full["tokens"]) << prompt << " " << sampling[1];
      EXPECT_EQ(cached["prompt_tokens"], full["prompt_tokens"]);
    }
  }
}

TEST(Generate, JsonAgreesWithTheText) {
  const std::vector<std::string> args = {"--prompt", "5: the", "--max-tokens", "40", "--temperature", "0"};
  const auto j = generate_json(args);
  EXPECT_EQ(j["prompt_tokens"], nlohmann::json({53, 58, 32, 116, 104, 101}));
  EXPECT_GT(j["tokens_per_second"].get<double>(), 0.0);
  std::string text = "5: the";
  for (const auto& t : j["tokens"]) text += static_cast<char>(t.get<int>());
  EXPECT_EQ(j["text"], text);
  EXPECT_EQ(generate(args).output, text + "\n");
  const auto ids =
      generate_json({"--prompt-tokens", "53,58,32,116,104,101", "--max-tokens", "40", "--temperature", "0"});
  EXPECT_EQ(ids["tokens"], j["tokens"]);
}

TEST(Generate, BadInputIsOneErrorLine) {
  const std::string layers = train("layers",
                                   "[[model.layers]]\ntype = \"embedding\"\nvocab_size = 256\nblock_size = 32\n"
                                   "n_embd = 8\n[[model.layers]]\ntype = \"linear\"\nout = 256\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"generate", (work_dir() / "missing.h5").string(), "--prompt", "a", "--max-tokens", "5"}, "no such file"},
      {{"generate", gpt(), "--prompt", "", "--max-tokens", "5"}, "the prompt is empty"},
      {{"generate", gpt(), "--prompt", "a", "--max-tokens", "5", "--top-k", "-3"}, "--top-k"},
      {{"generate", gpt(), "--prompt", "a", "--max-tokens", "5", "--top-k", "many"}, "--top-k"},
      {{"generate", gpt(), "--prompt", "a", "--max-tokens", "0"}, "--max-tokens"},
      {{"generate", gpt(), "--prompt-tokens", "1,256", "--max-tokens", "5"}, "'256' is not a token id"},
      {{"generate", gpt(), "--max-tokens", "5"}, "--prompt TEXT or --prompt-tokens"},
      {{"generate", layers, "--prompt", "a", "--max-tokens", "5"}, "not a GPT"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = ringtrain(args);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(error_lines(r.output), 1u) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
  }
  const auto two = run_ringtrain(2, {"generate", gpt(), "--prompt", "a", "--max-tokens", "5"});
  EXPECT_NE(two.exit_code, 0);
  EXPECT_EQ(error_lines(two.output), 1u) << two.output;
  EXPECT_NE(two.output.find("runs on one process"), std::string::npos) << two.output;
}

}  // namespace
}  // namespace ringtrain::test
