// A GPT language model end to end through the real executable, on byte tokens converted from a
// generated text: training lowers the validation loss, 1 rank with batch 2B equals 2 ranks with
// batch B, a stopped run resumes bit for bit (also on another number of ranks), ZeRO stages 1
// and 2 train bit for bit like stage 0 and their checkpoints resume into each other, bench train and
// tune batch run it, and a wrong model/data pairing is one clear error.
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
  static const fs::path dir = fresh_temp_dir("ringtrain-gpt");
  return dir;
}

const fs::path& token_dir() {
  static const fs::path dir = write_token_corpus(work_dir());
  return dir;
}

std::string config_path() {
  static const std::string path = [] {
    const fs::path p = work_dir() / "gpt.toml";
    std::ofstream(p) << "[data]\nformat = \"tokens\"\ntrain = \"" << (token_dir() / "train.h5").string()
                     << "\"\ntest = \"" << (token_dir() / "val.h5").string()
                     << "\"\n[model]\nfamily = \"gpt\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nblock_size = 32\n"
                        "[optim]\nname = \"adamw\"\nlr = 0.003\nbeta2 = 0.95\nweight_decay = 0.1\n"
                        "clip_grad_norm = 1.0\nwarmup_steps = 5\nschedule = \"cosine\"\nmin_lr = 0.0003\n"
                        "[train]\nbatch_size = 8\nmax_steps = 40\nlog_every = 10\n";
    return p.string();
  }();
  return path;
}

nlohmann::json train(int ranks, const std::string& run, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"train", config_path(), "--set", "run.dir=" + (work_dir() / run).string()};
  for (auto& e : extra) {
    args.emplace_back("--set");
    args.push_back(e);
  }
  const auto r = run_ringtrain(ranks, args);
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 75) << r.output;
  std::ifstream in(work_dir() / run / "summary.json");
  return nlohmann::json::parse(in);
}

double relative(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

TEST(GptTrain, LearnsAndReportsTokens) {
  const auto s = train(1, "learn", {"train.eval_every=15", "train.eval_batches=2"});
  const double chance = std::log(256.0);
  EXPECT_LT(s["val_loss"].get<double>(), chance - 1.5) << s.dump();
  EXPECT_GT(s["tokens_per_second"].get<double>(), 0.0);
  EXPECT_GT(s["mfu"].get<double>(), 0.0);
  EXPECT_LT(s["mfu"].get<double>(), 1.0);
  EXPECT_EQ(s["parameters"].get<std::int64_t>(), 34688);  // tied LM head: the token table once
  // train.eval_every: evaluations at steps 15 and 30, then the run's end (step 40)
  std::ifstream metrics(work_dir() / "learn" / "metrics.jsonl");
  std::vector<std::int64_t> eval_steps;
  double last_val_loss = 0;  // each evaluation's record names its loss val_loss too
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] != "eval" && j["type"] != "epoch") continue;
    eval_steps.push_back(j["global_step"].get<std::int64_t>());
    last_val_loss = j.value("val_loss", -1.0);
  }
  EXPECT_EQ(eval_steps, (std::vector<std::int64_t>{15, 30, 40}));
  EXPECT_EQ(last_val_loss, s["val_loss"].get<double>());
}

TEST(GptTrain, OneRankTwiceTheBatchEqualsTwoRanks) {
  const auto one = train(1, "np1", {"train.batch_size=8"});
  const auto two = train(2, "np2", {"train.batch_size=4"});
  EXPECT_LT(relative(two["final_train_loss"], one["final_train_loss"]), 1e-5);
  EXPECT_LT(relative(two["val_loss"], one["val_loss"]), 1e-5);
}

TEST(GptTrain, ResumeIsBitExactAlsoOnOtherRankCounts) {
  const auto straight = train(1, "straight");
  train(1, "stopped", {"train.exit_at_step=15"});
  const auto resumed = train(1, "stopped", {"train.resume=auto"});
  EXPECT_EQ(resumed["param_checksum"], straight["param_checksum"]);
  EXPECT_EQ(resumed["start_step"].get<int>(), 15);
  // The resumed process marks where its records take over in metrics.jsonl.
  std::ifstream metrics(work_dir() / "stopped" / "metrics.jsonl");
  std::vector<std::int64_t> resumes;
  for (std::string line; std::getline(metrics, line);)
    if (const auto j = nlohmann::json::parse(line); j["type"] == "resume") resumes.push_back(j["global_step"]);
  EXPECT_EQ(resumes, (std::vector<std::int64_t>{15}));
  train(1, "moved", {"train.exit_at_step=15"});
  const auto moved = train(2, "moved", {"train.resume=auto", "train.batch_size=4"});
  EXPECT_LT(relative(moved["final_train_loss"], straight["final_train_loss"]), 1e-5);
}

// AdamW with clipping, weight-decay groups and tied weights: the sharded optimizer state must
// cover every parameter exactly once, and the checkpoint must hold it whole.
TEST(GptTrain, ZeroStagesTrainBitwiseLikeStage0AndCheckpointsCrossResume) {
  const std::string batch = "train.batch_size=4";
  const auto stage0 = train(2, "zero0", {batch});
  const auto stage1 = train(2, "zero1", {batch, "train.zero_stage=1"});
  EXPECT_EQ(stage1["param_checksum"], stage0["param_checksum"]);
  // stage 3: parameters gathered per bucket around forward and backward (the tied token table's
  // bucket by the embedding and the LM head), evaluation included
  const auto stage3 = train(2, "zero3", {batch, "train.zero_stage=3"});
  EXPECT_EQ(stage3["param_checksum"], stage0["param_checksum"]);
  EXPECT_EQ(stage3["final_test_loss"], stage0["final_test_loss"]);
  EXPECT_FALSE(stage0["final_test_loss"].is_null());
  EXPECT_LT(stage3["memory"]["parameters"].get<double>(), 0.6 * stage0["memory"]["parameters"].get<double>());
  EXPECT_GT(stage3["memory"]["gathered_parameters"].get<double>(), 0.0);
  // bf16 compute: each layer's compute copy rounded from the gathered master as it is used
  const auto bf16 = train(2, "zero-bf16-0", {batch, "train.precision=bf16"});
  const auto bf16_stage3 = train(2, "zero-bf16-3", {batch, "train.precision=bf16", "train.zero_stage=3"});
  EXPECT_EQ(bf16_stage3["param_checksum"], bf16["param_checksum"]);
  // stage 2 with small buckets (several staged in turn, the tied token table's of its own) and
  // accumulation (the staged buckets join the carry one by one)
  const std::string small_buckets = "comm.bucket_mb=0.01", small_first = "comm.first_bucket_mb=0.01";
  const auto accumulated =
      train(2, "zero-acc0", {"train.batch_size=2", "train.accumulation_steps=2", small_buckets, small_first});
  const auto stage2 =
      train(2, "zero2",
            {"train.batch_size=2", "train.accumulation_steps=2", "train.zero_stage=2", small_buckets, small_first});
  EXPECT_EQ(stage2["param_checksum"], accumulated["param_checksum"]);
  const auto stage3_accumulated =
      train(2, "zero3-acc",
            {"train.batch_size=2", "train.accumulation_steps=2", "train.zero_stage=3", small_buckets, small_first});
  EXPECT_EQ(stage3_accumulated["param_checksum"], accumulated["param_checksum"]);
  // checkpoints cross-resumed between stages 3 and 0, both ways
  train(2, "zero-cross", {batch, "train.zero_stage=3", "train.exit_at_step=15"});
  const auto to_stage0 = train(2, "zero-cross", {batch, "train.resume=auto"});
  EXPECT_EQ(to_stage0["start_step"].get<int>(), 15);
  EXPECT_EQ(to_stage0["param_checksum"], stage0["param_checksum"]);
  train(2, "zero-back", {batch, "train.exit_at_step=15"});
  const auto to_stage3 = train(2, "zero-back", {batch, "train.zero_stage=3", "train.resume=auto"});
  EXPECT_EQ(to_stage3["param_checksum"], stage0["param_checksum"]);
  // 4 ranks at stage 3 to 2 ranks at stage 1: another sharding and reduction order, the same training
  train(4, "zero-4to2", {"train.batch_size=2", "train.zero_stage=3", "train.exit_at_step=15"});
  const auto moved = train(2, "zero-4to2", {batch, "train.zero_stage=1", "train.resume=auto"});
  EXPECT_EQ(moved["start_step"].get<int>(), 15);
  EXPECT_LT(relative(moved["final_train_loss"], stage0["final_train_loss"]), 1e-5);
}

// A token table of several gradient blocks (20,000 x 32: three blocks of at most 8,192 rows):
// its gradient is summed and reduced block by block, each block a bucket of its own, so stage 2
// stages it one bucket at a time instead of holding the whole table's gradient; stage 3 gathers
// the table whole. Bitwise stage 0 either way.
TEST(GptTrain, ZeroStagesReduceALargeTiedTableBlockByBlock) {
  const std::vector<std::string> large = {"model.vocab_size=20000", "train.batch_size=4", "train.max_steps=6",
                                          "comm.bucket_mb=0.25", "comm.first_bucket_mb=0.25"};
  auto with = [&](const std::string& stage) {
    std::vector<std::string> e = large;
    e.push_back("train.zero_stage=" + stage);
    return e;
  };
  const auto stage0 = train(2, "table0", with("0"));
  const auto stage2 = train(2, "table2", with("2"));
  const auto stage3 = train(2, "table3", with("3"));
  EXPECT_EQ(stage2["param_checksum"], stage0["param_checksum"]);
  EXPECT_EQ(stage3["param_checksum"], stage0["param_checksum"]);
  // stage 2: the rank's half of the gradients, and a staging ring (a comm buffer) of one block
  // (1 MiB), not the table's 2.4 MiB gradient
  const double full = stage0["memory"]["gradients"].get<double>();
  EXPECT_LT(stage2["memory"]["gradients"].get<double>(), full / 2 + 4096) << stage2["memory"].dump();
  EXPECT_GT(stage2["memory"]["comm_buffers"].get<double>(), 0) << stage2["memory"].dump();
  EXPECT_LT(stage2["memory"]["comm_buffers"].get<double>(), 1.05 * (1 << 20)) << stage2["memory"].dump();
  EXPECT_EQ(stage0["memory"]["comm_buffers"].get<double>(), 0) << stage0["memory"].dump();
}

// fp16 with a loss scale so large that the first steps overflow: every rank skips the same
// steps at stages 1 to 3, where each checks only its shard of the gradients.
TEST(GptTrain, ZeroStagesSkipTheOverflowingFp16StepsOfStage0) {
  const std::vector<std::string> fp16 = {"train.batch_size=4", "train.max_steps=12", "train.precision=fp16",
                                         "loss_scale.init=1e30"};
  const auto stage0 = train(2, "zero-fp16-0", fp16);
  EXPECT_GT(stage0["skipped_steps"].get<int>(), 0) << stage0.dump();
  for (int stage : {1, 2, 3}) {
    auto sharded = fp16;
    sharded.push_back("train.zero_stage=" + std::to_string(stage));
    const auto s = train(2, "zero-fp16-" + std::to_string(stage), sharded);
    EXPECT_EQ(s["skipped_steps"], stage0["skipped_steps"]) << "stage " << stage;
    EXPECT_EQ(s["param_checksum"], stage0["param_checksum"]) << "stage " << stage;
  }
}

// Magnitude pruning of the linear weights up to step 20 of 40: the masks zero the parameters on
// every rank and the momentum of the sharded optimizer state where each rank holds it.
TEST(GptTrain, ZeroStagesPruneLikeStage0) {
  const std::vector<std::string> prune = {"train.batch_size=4", "prune.method=magnitude", "prune.sparsity=0.5",
                                          "prune.start_step=5", "prune.end_step=20",      "prune.every_steps=5"};
  const auto stage0 = train(2, "zero-prune-0", prune);
  for (int stage : {1, 2, 3}) {
    auto sharded = prune;
    sharded.push_back("train.zero_stage=" + std::to_string(stage));
    const auto s = train(2, "zero-prune-" + std::to_string(stage), sharded);
    EXPECT_EQ(s["param_checksum"], stage0["param_checksum"]) << "stage " << stage;
  }
}

TEST(GptTrain, BenchTrainAndTuneBatchRunIt) {
  auto r =
      run_ringtrain(2, {"bench", "train", config_path(), "--synthetic", "--steps", "3", "--warmup", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(lines_of(r.output).back());
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  EXPECT_EQ(j["params"].get<std::int64_t>(), 34688);
  r = run_ringtrain(1, {"tune", "batch", config_path(), "--max-batch", "16"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("choice: batch"), std::string::npos) << r.output;
}

// The README's demonstration in small: a memory limit that stage 0's training state does not fit
// under (tune batch says so before allocating anything) fits stage 3 on the same 2 ranks.
TEST(GptTrain, TuneBatchSeesWhatStageThreeSaves) {
  auto tune = [](int stage, const std::string& limit) {
    std::vector<std::string> args = {"tune",        "batch",
                                     config_path(), "--min-batch",
                                     "1",           "--max-batch",
                                     "1",           "--rounds",
                                     "1",           "--steps",
                                     "1",           "--json",
                                     "--set",       "train.zero_stage=" + std::to_string(stage),
                                     "--set",       "comm.bucket_mb=0.01",  // a gather group per block or so
                                     "--set",       "comm.first_bucket_mb=0.01"};
    if (!limit.empty()) args.insert(args.end(), {"--memory-limit", limit});
    return run_ringtrain(2, args);
  };
  auto measured = [](const CommandResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(lines_of(r.output).back())["rows"][0]["measured_bytes"].get<double>();
  };
  const double stage0 = measured(tune(0, "")), stage3 = measured(tune(3, ""));
  ASSERT_LT(stage3, stage0);
  const std::string limit = std::to_string(static_cast<long>((stage0 + stage3) / 2));
  const auto refused = tune(0, limit);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("no batch size to time: batch 1 would need an estimated"), std::string::npos)
      << refused.output;
  EXPECT_LE(measured(tune(3, limit)), std::stod(limit));
}

// Exactly one error line, naming what is wrong.
void expect_error(const std::vector<std::string>& sets, const std::string& needle) {
  std::vector<std::string> args = {"train", config_path(), "--set", "run.dir=" + (work_dir() / "bad").string()};
  for (const auto& s : sets) {
    args.emplace_back("--set");
    args.push_back(s);
  }
  const auto r = run_ringtrain(2, args);
  EXPECT_NE(r.exit_code, 0);
  const std::vector<std::string> errors = error_lines(r.output);
  EXPECT_EQ(errors.size(), 1u) << r.output;
  for (const auto& line : errors) EXPECT_NE(line.find(needle), std::string::npos) << line;
}

TEST(GptTrain, WrongModelsForTheDataAreOneError) {
  expect_error({"model.vocab_size=100"}, "the model predicts 100 tokens but");
  expect_error({"model.n_head=3"}, "model.n_embd = 32 is not a multiple of model.n_head = 3");
  expect_error({"data.block_size=64"}, "data.block_size = 64 is longer than model.block_size = 32");
  expect_error({"data.format=images"}, "train.h5");
}

// Held-out tokens of another tokenizer or vocabulary: the same ids would be other text.
TEST(GptTrain, HeldOutTokensOfAnotherTokenizerOrVocabularyAreOneError) {
  const fs::path raw = work_dir() / "held-out.bin";
  std::string bytes(8192, '\0');
  for (std::size_t i = 0; i < bytes.size(); i += 2) bytes[i] = static_cast<char>(i / 2 % 26);  // < 26 as uint16 too
  std::ofstream(raw, std::ios::binary) << bytes;
  const auto convert = [&](const std::string& dtype, const std::string& vocab, const std::string& name) {
    const fs::path out = work_dir() / name;
    const auto r = run_ringtrain(1, {"data", "convert", "--tokens", raw.string(), "--format", "raw", "--dtype", dtype,
                                     "--vocab", vocab, "--tokenizer", "external", "-o", out.string()});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return out.string();
  };
  expect_error({"data.test=" + convert("uint8", "256", "external.h5")},
               "tokenizer 'external', but data.train's is 'byte'");
  expect_error({"data.test=" + convert("uint16", "300", "wider.h5")},
               "vocabulary of 300 tokens, but data.train has 256");
}

TEST(GptTrain, ZeroStageOutOfRangeIsOneLine) { expect_error({"train.zero_stage=4"}, "train.zero_stage"); }

}  // namespace
}  // namespace ringtrain::test
