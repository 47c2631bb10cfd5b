// A GPT's weights out of ringtrain and back in, through the real executable: `ckpt export
// --format safetensors` writes a trained checkpoint's parameters, a new run with model.init_from
// starts from them (on 2 ranks: rank 0 reads, all start alike) and evaluates as the trained run
// did, a resumed run ignores model.init_from, and bad files or models are one error line.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "integration/run_command.hpp"
#include "integration/token_corpus.hpp"

namespace ringtrain::test {
namespace {

namespace fs = std::filesystem;

const fs::path& work_dir() {
  static const fs::path dir = fresh_temp_dir("ringtrain-gpt-export");
  return dir;
}

std::string path_in(const std::string& name) { return (work_dir() / name).string(); }

// Byte tokens of a text with structure to learn, and a GPT config for them.
const std::string& config_path() {
  static const std::string path = [] {
    write_token_corpus(work_dir(), 30000);
    std::ofstream(path_in("gpt.toml")) << "[data]\nformat = \"tokens\"\ntrain = \"" << path_in("tokens/train.h5")
                                       << "\"\ntest = \"" << path_in("tokens/val.h5")
                                       << "\"\n[model]\nfamily = \"gpt\"\nn_layer = 2\nn_head = 2\nn_embd = 32\n"
                                          "block_size = 32\n[optim]\nname = \"adamw\"\nlr = 0.003\n"
                                          "[train]\nbatch_size = 8\nmax_steps = 30\n";
    return path_in("gpt.toml");
  }();
  return path;
}

CommandResult train(int ranks, const std::string& run, const std::vector<std::string>& sets,
                    const std::string& config = config_path()) {
  std::vector<std::string> args = {"train", config, "--set", "run.dir=" + path_in(run)};
  for (const auto& s : sets) {
    args.emplace_back("--set");
    args.push_back(s);
  }
  return run_ringtrain(ranks, args);
}

nlohmann::json summary(const std::string& run) {
  std::ifstream in(path_in(run) + "/summary.json");
  return nlohmann::json::parse(in);
}

// The trained run's last checkpoint, exported once.
const std::string& exported() {
  static const std::string path = [] {
    const auto t = train(1, "trained", {});
    EXPECT_EQ(t.exit_code, 0) << t.output;
    const auto r = run_ringtrain(1, {"ckpt", "export", path_in("trained/checkpoints/ckpt-000000030.h5"), "--format",
                                     "safetensors", "-o", path_in("trained.safetensors")});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("-> " + path_in("trained.safetensors") + " (safetensors, 28 tensors, 34688 parameters"),
              std::string::npos)
        << r.output;
    return path_in("trained.safetensors");
  }();
  return path;
}

// Exactly one error line, naming what is wrong.
void expect_one_error(const CommandResult& r, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0);
  const std::vector<std::string> errors = error_lines(r.output);
  EXPECT_EQ(errors.size(), 1u) << r.output;
  for (const auto& line : errors) EXPECT_NE(line.find(needle), std::string::npos) << line;
}

TEST(GptExport, ANewRunFromTheExportedWeightsEvaluatesAsTheTrainedRun) {
  const std::string& file = exported();
  const double trained = summary("trained")["val_loss"].get<double>();
  ASSERT_LT(trained, std::log(256.0) - 1.0);
  // One step at a learning rate too small to move an f32 weight: the evaluation after it is the
  // trained model's, here on 2 ranks (rank 0 reads the file, the others receive it).
  const auto r =
      train(2, "from-file", {"model.init_from=" + file, "train.max_steps=1", "train.batch_size=4", "optim.lr=1e-12"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("init:   28 parameter tensors from " + file), std::string::npos) << r.output;
  EXPECT_LT(std::fabs(summary("from-file")["val_loss"].get<double>() - trained) / trained, 1e-5);
  const auto fresh = train(1, "fresh", {"train.max_steps=1", "optim.lr=1e-12"});
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  EXPECT_GT(summary("fresh")["val_loss"].get<double>(), trained + 1.0) << "a random start is far from it";
}

TEST(GptExport, AResumedRunIgnoresInitFrom) {
  auto r = train(1, "resumed", {"train.exit_at_step=5"});
  ASSERT_EQ(r.exit_code, 75) << r.output;
  r = train(1, "resumed", {"train.resume=auto", "model.init_from=" + path_in("no-such.safetensors")});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("init:"), std::string::npos) << r.output;
}

TEST(GptExport, BadFilesAndModelsAreOneErrorLine) {
  const std::string& file = exported();
  expect_one_error(train(2, "bad", {"model.init_from=" + path_in("no-such.safetensors")}),
                   "model.init_from: " + path_in("no-such.safetensors") + ": cannot open");
  expect_one_error(train(2, "bad", {"model.init_from=" + config_path()}), "model.init_from: " + config_path());
  expect_one_error(train(2, "bad", {"model.init_from=" + file, "model.n_embd=64"}),
                   "tensor 'transformer.wte.weight' has shape [256, 32] but the model needs [256, 64]");
  expect_one_error(train(2, "bad", {"model.init_from=" + file, "model.n_layer=3"}),
                   "tensor 'transformer.h.2.ln_1.weight' is missing");
  expect_one_error(run_ringtrain(1, {"ckpt", "export", path_in("none.h5"), "--format", "safetensors", "-o", "x"}),
                   path_in("none.h5"));
  // A model of [[model.layers]] tables (here a token embedding and a linear head) is not a GPT.
  std::ofstream(path_in("layers.toml")) << "[data]\nformat = \"tokens\"\ntrain = \"" << path_in("tokens/train.h5")
                                        << "\"\nblock_size = 8\n[[model.layers]]\ntype = \"embedding\"\n"
                                           "vocab_size = 256\nblock_size = 8\nn_embd = 8\n[[model.layers]]\n"
                                           "type = \"linear\"\nout = 256\n[train]\nbatch_size = 4\nmax_steps = 2\n";
  const auto t = train(1, "layers", {}, path_in("layers.toml"));
  ASSERT_EQ(t.exit_code, 0) << t.output;
  expect_one_error(run_ringtrain(1, {"ckpt", "export", path_in("layers/checkpoints/ckpt-000000002.h5"), "--format",
                                     "safetensors", "-o", path_in("layers.safetensors")}),
                   "the model is not a GPT");
  EXPECT_FALSE(fs::exists(path_in("layers.safetensors")));
}

}  // namespace
}  // namespace ringtrain::test
