// Bad input through the real executable, on 1 and 2 ranks: each case must exit non-zero
// within the timeout (no hang), print exactly one "ringtrain: error:" line that names the
// problem, and never crash (no signal, no core dump); command-line mistakes exit 1.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <fstream>
#include <vector>

#include "integration/run_command.hpp"

namespace ringtrain::test {
namespace {

namespace fs = std::filesystem;

const fs::path& work_dir() {
  static const fs::path dir = fresh_temp_dir("ringtrain-cli-errors");
  return dir;
}

std::string write_text(const std::string& name, const std::string& text) {
  const auto path = work_dir() / name;
  std::ofstream(path) << text;
  return path.string();
}

// A dataset file with images of the given dims (uint8, or int16 when wide) and labels of length
// n_labels, all equal to label_value, or cycling through 0..9 when label_value is kCycle.
constexpr int kCycle = -1;
std::string write_h5(const std::string& name, const std::vector<hsize_t>& image_dims, hsize_t n_labels, int label_value,
                     bool with_labels = true, bool wide = false) {
  auto path = (work_dir() / name).string();
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t count = 1;
  for (auto d : image_dims) count *= d;
  std::vector<std::uint8_t> images(count, 7);
  const hid_t s = H5Screate_simple(static_cast<int>(image_dims.size()), image_dims.data(), nullptr);
  const hid_t d =
      H5Dcreate2(f, "images", wide ? H5T_STD_I16LE : H5T_STD_U8LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (count > 0) H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, images.data());
  H5Dclose(d);
  H5Sclose(s);
  if (with_labels) {
    std::vector<std::uint8_t> labels(n_labels);
    for (hsize_t i = 0; i < n_labels; ++i)
      labels[i] = static_cast<std::uint8_t>(label_value == kCycle ? static_cast<int>(i % 10) : label_value);
    const hid_t ls = H5Screate_simple(1, &n_labels, nullptr);
    const hid_t ld = H5Dcreate2(f, "labels", H5T_STD_U8LE, ls, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (n_labels > 0) H5Dwrite(ld, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data());
    H5Dclose(ld);
    H5Sclose(ls);
  }
  H5Fclose(f);
  return path;
}

const char* kModel = "[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n";

std::string config_for(const std::string& train_path, const std::string& extra = "") {
  return "[run]\ndir = \"" + (work_dir() / "run").string() + "\"\n[train]\nbatch_size = 4\nlog_every = 1\n" + extra +
         "\n[data]\ntrain = \"" + train_path + "\"\n" + kModel;
}

struct Case {
  std::string name;
  std::vector<std::string> args;
  std::vector<std::string> expected;  // substrings of the error line
};

std::vector<Case> cases() {
  const auto good = write_h5("good.h5", {64, 1, 4, 4}, 64, kCycle);
  std::vector<Case> c;
  c.push_back({"missing config", {"train", (work_dir() / "nope.toml").string()}, {"nope.toml", "no such file"}});
  c.push_back({"oversized config",
               {"train", write_text("big.toml", std::string(std::size_t{17} << 20, '#'))},
               {"big.toml: 17825792 bytes, more than the 16 MiB a config may have"}});
  c.push_back({"syntax error", {"train", write_text("syntax.toml", "[train]\nepochs = = 2\n")}, {"syntax.toml:2:"}});
  c.push_back({"unknown key",
               {"train", write_text("unknown.toml", config_for(good, "epoch = 2"))},
               {"unknown key", "train.epoch"}});
  const std::string plain = write_text("plain.toml", config_for(good));
  c.push_back({"unknown key from --set",
               {"train", plain, "--set", "train.epoch=2"},
               {"unknown key 'train.epoch' (did you mean 'train.epochs'?) (from --set)"}});
  c.push_back({"key of another variant",
               {"train", plain, "--set", "optim.beta1=0.9"},
               {"key 'optim.beta1' is not used by optim.name = \"sgd\" (only by \"adamw\")"}});
  c.push_back({"layer index out of range", {"train", plain, "--set", "model.layers[5].out=1"}, {"no index 5"}});
  c.push_back({"unset of an absent key", {"train", plain, "--unset", "train.nope"}, {"--unset 'train.nope'"}});
  c.push_back({"wrong type",
               {"train", write_text("type.toml", config_for(good)), "--set", "train.epochs=\"three\""},
               {"train.epochs", "integer"}});
  c.push_back({"missing data file",
               {"train", write_text("nodata.toml", config_for((work_dir() / "absent.h5").string()))},
               {"data.train", "absent.h5"}});
  c.push_back({"not hdf5",
               {"train", write_text("nothdf5.toml", config_for(write_text("text.h5", "hello\n")))},
               {"data.train", "text.h5", "HDF5"}});
  c.push_back({"missing labels",
               {"train", write_text("nolabels.toml", config_for(write_h5("nolabels.h5", {64, 1, 4, 4}, 0, 0, false)))},
               {"data.train", "labels", "images"}});
  c.push_back({"wrong rank",
               {"train", write_text("rank.toml", config_for(write_h5("rank3.h5", {64, 4, 4}, 64, 1)))},
               {"data.train", "rank3.h5", "images"}});
  c.push_back({"label out of range",
               {"train", write_text("range.toml", config_for(write_h5("range.h5", {64, 1, 4, 4}, 64, 12)))},
               {"data.train", "label", "12"}});
  c.push_back({"fewer samples than a global batch",
               {"train", write_text("small.toml", config_for(write_h5("small.h5", {3, 1, 4, 4}, 3, 1)))},
               {"global batch"}});
  c.push_back({"batch norm over one value per channel",
               {"train", write_text("bn1.toml", "[run]\ndir = \"" + (work_dir() / "run").string() +
                                                    "\"\n[train]\nbatch_size = 1\n[data]\ntrain = \"" + good +
                                                    "\"\n[[model.layers]]\ntype = \"conv2d\"\nout_channels = 2\n"
                                                    "kernel = 4\n[[model.layers]]\ntype = \"batchnorm2d\"\n" +
                                                    kModel)},
               {"train.batch_size = 1: model.layers[1] (batchnorm2d) needs 2 or more samples per rank in training"}});
  c.push_back({"a test set of another kind of samples",
               {"train", write_text("wide.toml", config_for(good)), "--set",
                "data.test=" + write_h5("wide.h5", {64, 1, 4, 4}, 64, kCycle, true, true)},
               {"data.test", "wide.h5: images are int16 but data.train's are uint8"}});
  c.push_back({"non-finite loss",
               {"train", write_text("nan.toml", config_for(good, "epochs = 50\n[optim]\nlr = 1e38\nmomentum = 0.9"))},
               {"non-finite loss"}});
  return c;
}

class CliErrors : public ::testing::TestWithParam<int> {};

TEST_P(CliErrors, EveryBadInputGivesOneClearLine) {
  const int ranks = GetParam();
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name + " on " + std::to_string(ranks) + " rank(s)");
    const auto r = run_ringtrain(ranks, c.args, 60);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_LT(r.exit_code, 124) << "timed out or killed by a signal:\n" << r.output;
    const std::vector<std::string> errors = error_lines(r.output);
    EXPECT_EQ(errors.size(), 1u) << r.output;
    const std::string error_line = errors.empty() ? std::string() : errors.back();
    for (const auto& e : c.expected)
      EXPECT_NE(error_line.find(e), std::string::npos) << "missing '" << e << "' in: " << error_line;
    EXPECT_EQ(r.output.find("core dumped"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << "should end collectively:\n" << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, CliErrors, ::testing::Values(1, 2));

// --set reaches a [[model.layers]] table by index and --unset drops a key: both show in the
// resolved config the run writes.
TEST(CliOverrides, SetReachesLayerTablesAndUnsetDropsAKey) {
  const auto good = write_h5("good-overrides.h5", {64, 1, 4, 4}, 64, kCycle);
  const std::string config = write_text("overrides.toml", config_for(good, "max_steps = 1\nseed = 5"));
  const fs::path run = work_dir() / "run-overrides";  // its checkpoint must not meet the error cases' runs
  const auto r = run_ringtrain(
      1,
      {"train", config, "--set", "model.layers[1].out=16", "--unset", "train.seed", "--set", "run.dir=" + run.string()},
      60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(run / "config.toml");
  const std::string resolved{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_NE(resolved.find("out = 16"), std::string::npos) << resolved;
  EXPECT_NE(resolved.find("seed = 0"), std::string::npos) << resolved;
}

// h5py and NumPy pipelines write [N, H, W, C]: such a file trains (as 8 channels of 8 x 3)
// with a warning that says how it is read.
TEST(DataWarnings, ChannelsLastImagesAreNamed) {
  const std::string nhwc = write_h5("nhwc.h5", {64, 8, 8, 3}, 64, kCycle);
  const auto r = run_ringtrain(1,
                               {"train", write_text("nhwc.toml", config_for(nhwc)), "--set", "train.max_steps=1",
                                "--set", "run.dir=" + (work_dir() / "nhwc-run").string()},
                               60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("data.train: samples of [8, 8, 3] are read as [C, H, W]: 8 channels of 8 x 3"),
            std::string::npos)
      << r.output;
}

TEST(CliOverrides, ConfigKeysListsTheDeclaredKeys) {
  const auto r = run_ringtrain(1, {"config", "keys", "--markdown"}, 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* row :
       {"| `train.epochs` | integer | `1` | [1, 1000000] |", "| `optim.momentum` | number | `0` | [0, 1) |",
        "| `data.train` | string(s) | (required) |", "| `model.layers[].type` | string | (required) |"})
    EXPECT_NE(r.output.find(row), std::string::npos) << row << "\n" << r.output;
}

// Output that does not reach stdout (here /dev/full: every write fails with ENOSPC, as on a full
// disk) fails the command, which exited 0 with an empty file before.
TEST(CliOutput, AFullStdoutFailsTheCommand) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this machine";
  const auto r = run_command("(" + shell_quote(RINGTRAIN_EXE) + " config keys --markdown >/dev/full)");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ringtrain: error: stdout: write failed: No space left on device"), std::string::npos)
      << r.output;
}

// Command-line mistakes: exit status 1 (not CLI11's own codes), one "ringtrain: error:" line
// (printed by rank 0 only) that names the problem and points at the right --help.
TEST_P(CliErrors, UsageErrorsExitOneWithTheErrorPrefix) {
  const int ranks = GetParam();
  const std::vector<Case> usage = {
      {"unknown subcommand", {"foo"}, {"'foo' is not a subcommand of 'ringtrain'", "train", "run 'ringtrain --help'"}},
      {"no subcommand", {}, {"'ringtrain' needs a subcommand", "doctor"}},
      {"unknown nested subcommand", {"ckpt", "foo"}, {"'foo' is not a subcommand of 'ringtrain ckpt'", "inspect"}},
      {"missing argument", {"train"}, {"config is required", "run 'ringtrain train --help'"}},
      {"unknown option", {"train", "--bogus", "x.toml"}, {"--bogus", "run 'ringtrain train --help'"}},
      {"bad value", {"tune", "batch", "x.toml", "--min-batch", "3"}, {"--min-batch: 3 is not a power of two"}},
      {"a word for an integer",
       {"tune", "batch", "x.toml", "--min-batch", "abc"},
       {"--min-batch: 'abc' is not an integer"}},
      {"a fraction for an integer",
       {"generate", "x", "--max-tokens", "1.5"},
       {"--max-tokens: '1.5' is not an integer"}},
      {"an exponent for an integer", {"generate", "x", "--max-tokens", "1e3"}, {"'1e3' is not an integer"}},
      {"a negative unsigned", {"generate", "x", "--max-tokens", "2", "--seed", "-1"}, {"--seed: -1 is below 0"}},
      {"an integer too large",
       {"generate", "x", "--max-tokens", "99999999999999999999"},
       {"is outside 1 to 1073741824"}},
      {"a number out of range", {"bench", "gemm", "--seconds", "1e9"}, {"--seconds: 1e9 is outside 0.05 to 60"}},
      {"not a finite number",
       {"generate", "x", "--max-tokens", "2", "--temperature", "nan"},
       {"'nan' is not a finite"}},
      {"below a lower bound", {"bench", "io", "x.h5", "--read-ahead", "0"}, {"--read-ahead: 0 is below 1"}}};
  for (const auto& c : usage) {
    SCOPED_TRACE(c.name + " on " + std::to_string(ranks) + " rank(s)");
    const auto r = run_ringtrain(ranks, c.args, 60);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    std::vector<std::string> errors;
    for (const auto& line : lines_of(r.output))
      if (line.rfind("ringtrain: error: ", 0) == 0) errors.push_back(line);
    ASSERT_EQ(errors.size(), 1u) << r.output;
    for (const auto& e : c.expected)
      EXPECT_NE(errors[0].find(e), std::string::npos) << "missing '" << e << "' in: " << errors[0];
  }
}

TEST_P(CliErrors, HelpShowsDefaultsAndExitsZero) {
  const auto r = run_ringtrain(GetParam(), {"tune", "batch", "--help"}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("=8"), std::string::npos) << "--min-batch's default:\n" << r.output;
  EXPECT_NE(r.output.find("=4096"), std::string::npos) << "--max-batch's default:\n" << r.output;
  EXPECT_EQ(r.output.find("=[]"), std::string::npos) << r.output;
  std::size_t usage_lines = 0;
  for (const auto& line : lines_of(r.output)) usage_lines += line.rfind("Usage:", 0) == 0 ? 1 : 0;
  EXPECT_EQ(usage_lines, 1u) << "rank 0 only:\n" << r.output;
}

}  // namespace
}  // namespace ringtrain::test
