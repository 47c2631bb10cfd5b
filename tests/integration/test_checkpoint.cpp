// Checkpoint/restart through the real executable on Fashion-MNIST (MLP, global batch 1024,
// 58 steps per epoch, so runs cross an epoch boundary and its evaluation): an interrupted and
// resumed run ends bitwise identical to a straight one (h5diff), a 4-rank checkpoint continues
// on 2 and 1 ranks, SIGTERM to one rank stops all at the same step with exit code 75, damaged
// checkpoints are skipped, SIGKILL during saves never leaves a broken `latest`, bad checkpoints
// or directories give one clear line, and so does crafted metadata (arrays, out-of-range values,
// values changed under the metadata checksum); the checksums inspect prints are what h5dump,
// split and xxhsum give.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX kill(), which <csignal> need not declare
#include <sys/mount.h>

#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <nlohmann/json.hpp>
#include <thread>

#include "integration/run_command.hpp"

namespace ringtrain::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr int kResumableExit = 75;
constexpr std::int64_t kGlobalBatch = 1024;

fs::path data_dir() { return RINGTRAIN_DATA_DIR; }

std::string fmt_step(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "ckpt-%09lld.h5", static_cast<long long>(step));
  return name;
}

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("ringtrain-ckpt-test") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string mlp_config() { return std::string(RINGTRAIN_SOURCE_DIR) + "/examples/fashion_mnist/mlp.toml"; }

// The MLP example trained with AdamW instead of SGD, written next to the runs.
std::string adamw_config(const fs::path& dir) {
  std::ifstream in(mlp_config());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string sgd = "name = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n";
  const auto at = text.find(sgd);
  EXPECT_NE(at, std::string::npos) << "examples/fashion_mnist/mlp.toml changed its [optim] section";
  if (at != std::string::npos) text.replace(at, sgd.size(), "name = \"adamw\"\nlr = 0.001\n");
  std::string path = (dir / "mlp-adamw.toml").string();
  std::ofstream(path) << text;
  return path;
}

// `ringtrain train CONFIG` on `ranks` ranks with the same global batch on any rank count.
CommandResult train(int ranks, const fs::path& run_dir, const std::vector<std::string>& extra,
                    const std::string& config = mlp_config()) {
  std::vector<std::string> args = {"train", config,
                                   "--set", "data.train=" + (data_dir() / "train.h5").string(),
                                   "--set", "data.test=" + (data_dir() / "test.h5").string(),
                                   "--set", "train.batch_size=" + std::to_string(kGlobalBatch / ranks),
                                   "--set", "train.log_every=10",
                                   "--set", "run.dir=" + run_dir.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_ringtrain(ranks, args, 180);
}

std::string ckpt(const fs::path& run_dir, std::int64_t step) {
  return (run_dir / "checkpoints" / fmt_step(step)).string();
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A float dataset of a checkpoint file (HDF5 C API, serial).
std::vector<float> read_floats(const std::string& path, const std::string& name) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(file, 0) << path;
  if (file < 0) return {};
  const hid_t dset = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  const hid_t space = H5Dget_space(dset);
  std::vector<float> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)));
  EXPECT_GE(H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  H5Sclose(space);
  H5Dclose(dset);
  H5Fclose(file);
  return v;
}

// ||a - b|| / ||a||.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.empty()) return 1e30;
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(a[i]) * a[i];
  }
  return std::sqrt(diff / norm);
}

// Flips one byte in the middle of a dataset's raw data (found with H5Dget_offset).
void flip_data_byte(const std::string& path, const std::string& name) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  const hid_t dset = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  const haddr_t offset = H5Dget_offset(dset);
  const hsize_t size = H5Dget_storage_size(dset);
  H5Dclose(dset);
  H5Fclose(file);
  ASSERT_NE(offset, HADDR_UNDEF);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset + size / 2));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset + size / 2));
  f.put(static_cast<char>(c ^ 0x5a));
  ASSERT_TRUE(f.good());
}

void truncate_to_half(const std::string& path) { fs::resize_file(path, fs::file_size(path) / 2); }

CommandResult inspect(const std::string& path) {
  return run_command(shell_quote(RINGTRAIN_EXE) + " ckpt inspect " + shell_quote(path));
}

// The MLP's runs below stop at kStop and finish a run of kTotal steps.
constexpr std::int64_t kStop = 40;
constexpr std::int64_t kTotal = 80;

// A run stopped at `stop` (train.exit_at_step) and resumed to `total` against a straight run of
// `total` steps: the MLP with SGD, with AdamW (its bias correction depends on the restored step
// count), and the residual CNN example (named values, adds, batch norm and its running
// statistics, which the file keeps per rank).
struct ResumeCase {
  int ranks;
  std::string model;
  std::int64_t global_batch, stop, total;
};

void PrintTo(const ResumeCase& c, std::ostream* os) {
  *os << c.model << " on " << c.ranks << " ranks, global batch " << c.global_batch << ", stop " << c.stop << " of "
      << c.total;
}

class BitwiseResume : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(BitwiseResume, StoppedAndResumedEqualsStraight) {
  const ResumeCase c = GetParam();
  // no test-set evaluation: what is compared is the training state
  const std::vector<std::string> run = {"--set", "train.max_steps=" + std::to_string(c.total),
                                        "--set", "train.batch_size=" + std::to_string(c.global_batch / c.ranks),
                                        "--set", "data.test="};
  const fs::path dir = fresh_dir("bitwise-" + c.model + "-np" + std::to_string(c.ranks));
  const std::string config = c.model == "adamw" ? adamw_config(dir)
                             : c.model == "resnet"
                                 ? std::string(RINGTRAIN_SOURCE_DIR) + "/examples/fashion_mnist/resnet.toml"
                                 : mlp_config();
  const CommandResult straight = train(c.ranks, dir / "straight", run, config);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;

  std::vector<std::string> first = run;
  first.insert(first.end(), {"--set", "train.exit_at_step=" + std::to_string(c.stop)});
  const CommandResult stopped = train(c.ranks, dir / "split", first, config);
  ASSERT_EQ(stopped.exit_code, kResumableExit) << stopped.output;
  const std::string at = std::to_string(c.stop);
  EXPECT_NE(stopped.output.find("stopped: train.exit_at_step = " + at + " reached after step " + at), std::string::npos)
      << stopped.output;
  std::vector<std::string> second = run;
  second.insert(second.end(), {"--set", "train.resume=auto"});
  const CommandResult resumed = train(c.ranks, dir / "split", second, config);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resume: " + ckpt(dir / "split", c.stop) + " at step " + at), std::string::npos)
      << resumed.output;

  const std::string a = ckpt(dir / "straight", c.total), b = ckpt(dir / "split", c.total);
  std::vector<std::string> datasets = {"/params"};
  datasets.emplace_back(c.model == "adamw" ? "/optimizer/m" : "/optimizer/velocity");
  if (c.model == "adamw") datasets.emplace_back("/optimizer/v");
  if (c.model == "resnet") datasets.emplace_back("/model_buffers");
  const std::string files = "h5diff " + shell_quote(a) + " " + shell_quote(b);
  for (const std::string& d : datasets) {
    std::string command = files;
    command.append(" ").append(d).append(" ").append(d);
    const CommandResult diff = run_command(command);
    EXPECT_EQ(diff.exit_code, 0) << d << ": " << diff.output;
  }
  // The runs' own end-of-training checksums agree too.
  const std::string sa = read_text(dir / "straight" / "summary.json"), sb = read_text(dir / "split" / "summary.json");
  // The file holds the logical parameters (the arena's alignment pads are not stored).
  EXPECT_EQ(read_floats(a, "params").size(), nlohmann::json::parse(sa).at("parameters").get<std::size_t>());
  const auto checksum = [](const std::string& s) { return s.substr(s.find("\"param_checksum\""), 40); };
  EXPECT_EQ(checksum(sa), checksum(sb));
}

INSTANTIATE_TEST_SUITE_P(Runs, BitwiseResume,
                         ::testing::Values(ResumeCase{2, "sgd", kGlobalBatch, kStop, kTotal},
                                           ResumeCase{4, "adamw", kGlobalBatch, kStop, kTotal},
                                           ResumeCase{2, "resnet", 32, 6, 12}),
                         [](const auto& info) { return info.param.model + "_np" + std::to_string(info.param.ranks); });

TEST(CheckpointResharding, FourRanksContinueOnTwoAndOne) {
  const fs::path dir = fresh_dir("reshard");
  const std::vector<std::string> total = {"--set", "train.max_steps=" + std::to_string(kTotal)};
  const CommandResult straight = train(4, dir / "straight", total);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  std::vector<std::string> stop = total;
  stop.insert(stop.end(), {"--set", "train.exit_at_step=" + std::to_string(kStop)});
  const CommandResult four = train(4, dir / "four", stop);
  ASSERT_EQ(four.exit_code, kResumableExit) << four.output;
  const std::vector<float> reference = read_floats(ckpt(dir / "straight", kTotal), "params");
  for (int ranks : {2, 1}) {
    const fs::path run = dir / ("on" + std::to_string(ranks));
    std::vector<std::string> resume = total;
    resume.insert(resume.end(), {"--set", "train.resume=" + ckpt(dir / "four", kStop), "--set",
                                 "checkpoint.dir=" + (run / "checkpoints").string()});
    const CommandResult r = train(ranks, run, resume);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("world size changed from 4 to " + std::to_string(ranks)), std::string::npos) << r.output;
    const double rel = relative_difference(reference, read_floats(ckpt(run, kTotal), "params"));
    // Only the summation order differs from the straight run (4 ranks' sums, 1 rank's none):
    // float reassociation over 40 SGD steps. Mostly ~1e-6, but a ReLU whose input for one
    // sample sits at zero can take the other side in one run: measured 2.5e-4 (2026-12-05, at
    // step 55, the difference in one hidden unit of the second layer, its weights and bias, as
    // such a flip would leave it; 1.4e-6 the commit before, whose rounding took another path). What this test is for
    // moves far more: the learning rate 1% off from step 40 gives 3.4e-3, momentum dropped 0.12.
    EXPECT_LT(rel, 1e-3) << "resumed on " << ranks << " ranks";
    EXPECT_GT(rel, -1.0);  // (a NaN would fail the line above)
  }
  // Another global batch cannot continue the same training: the error says what to set.
  const CommandResult wrong = run_ringtrain(
      2, {"train", std::string(RINGTRAIN_SOURCE_DIR) + "/examples/fashion_mnist/mlp.toml", "--set",
          "data.train=" + (data_dir() / "train.h5").string(), "--set", "data.test=", "--set", "train.batch_size=256",
          "--set", "run.dir=" + (dir / "wrong").string(), "--set", "train.resume=" + ckpt(dir / "four", kStop)});
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
  EXPECT_NE(wrong.output.find("global batch of 1024 but this run has 512"), std::string::npos) << wrong.output;
  EXPECT_NE(wrong.output.find("set train.batch_size = 512"), std::string::npos) << wrong.output;
}

class SigtermOneRank : public ::testing::TestWithParam<int> {};

TEST_P(SigtermOneRank, AllRanksStopAtTheSameStepAndResume) {
  const int ranks = GetParam();
  const fs::path dir = fresh_dir("sigterm-np" + std::to_string(ranks));
  const fs::path run = dir / "run";
  auto job = std::async(std::launch::async, [&] {
    return train(ranks, run, {"--set", "train.epochs=50", "--set", "train.log_every=1"});
  });
  const auto start = Clock::now();
  while (lines_in(run / "metrics.jsonl") < 5 && Clock::now() - start < std::chrono::seconds(90))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto pids = rank_pids(run.string());
  ASSERT_EQ(pids.size(), static_cast<std::size_t>(ranks));
  ASSERT_EQ(::kill(pids.at(ranks - 1), SIGTERM), 0);  // one rank only, not rank 0
  const CommandResult r = job.get();
  for (const auto& [rank, pid] : rank_pids(run.string())) ::kill(pid, SIGKILL);  // never leave strays
  ASSERT_EQ(r.exit_code, kResumableExit) << r.output;
  const std::string stopped = "stopped: SIGTERM received by 1 of " + std::to_string(ranks) + " ranks after step ";
  const auto at = r.output.find(stopped);
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::int64_t step = std::stoll(r.output.substr(at + stopped.size()));
  EXPECT_GE(step, 5);
  // The advice continues this run, in its run directory.
  EXPECT_NE(r.output.find("; continue with --set run.dir=" + run.string() + " --set train.resume=auto (exit code 75)"),
            std::string::npos)
      << r.output;
  // One checkpoint, written by all ranks together at that step, and `latest` names it.
  EXPECT_EQ(read_text(run / "checkpoints" / "latest"), fmt_step(step) + "\n");
  const CommandResult check = inspect(ckpt(run, step));
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("position:   step " + std::to_string(step)), std::string::npos) << check.output;
  // The stopped run wrote its summary, marked unfinished.
  EXPECT_NE(read_text(run / "summary.json").find("\"finished\": false"), std::string::npos);
  // Resuming completes the run.
  const CommandResult resumed =
      train(ranks, run, {"--set", "train.max_steps=" + std::to_string(step + 10), "--set", "train.resume=auto"});
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step " + std::to_string(step) + " "), std::string::npos) << resumed.output;
  EXPECT_NE(read_text(run / "summary.json").find("\"finished\": true"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Ranks, SigtermOneRank, ::testing::Values(2, 4),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

TEST(CheckpointDamage, NewestDamagedFallsBackToThePreviousOne) {
  const fs::path dir = fresh_dir("damage");
  for (const std::string damage : {"flip", "truncate"}) {
    const fs::path run = dir / damage;
    const CommandResult first = train(2, run, {"--set", "train.max_steps=30", "--set", "checkpoint.every_steps=10"});
    ASSERT_EQ(first.exit_code, 0) << first.output;
    const std::string newest = ckpt(run, 30);
    if (damage == "flip")
      flip_data_byte(newest, "params");
    else
      truncate_to_half(newest);
    EXPECT_NE(inspect(newest).exit_code, 0);
    const CommandResult resumed = train(2, run, {"--set", "train.max_steps=40", "--set", "train.resume=auto"});
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("skipping a damaged checkpoint: " + (damage == "flip" ? newest : std::string())),
              std::string::npos)
        << resumed.output;
    EXPECT_NE(resumed.output.find("resume: " + ckpt(run, 20) + " at step 20"), std::string::npos) << resumed.output;
  }
}

// What `latest` names (empty when there is no `latest`).
std::string latest_of(const fs::path& run) {
  const std::string text = read_text(run / "checkpoints" / "latest");
  return text.substr(0, text.find('\n'));
}

// Rank 0 killed (SIGKILL, as by a node failure) in each window of the save of step 20, after
// the one of step 10: with RINGTRAIN_TEST_CRASH=<point>@20 it kills itself right after the
// temporary file is written, after the rename, and after `latest` moved. Every window leaves
// `latest` naming an intact checkpoint and every finished file intact, and `auto` resumes from
// the newest one that was complete (the step-20 file once it has its final name).
TEST(CheckpointCrash, EveryWindowOfASaveLeavesAnIntactCheckpointToResume) {
  const fs::path dir = fresh_dir("crash-points");
  struct Window {
    const char* point;
    std::set<std::string> files;  // in checkpoints/ after the crash, .lock aside
    const char* latest;
    std::int64_t resumed_step;
  };
  const std::vector<Window> windows = {
      {"after-temp-write", {fmt_step(10), fmt_step(20) + ".tmp", "latest"}, "ckpt-000000010.h5", 10},
      {"after-rename", {fmt_step(10), fmt_step(20), "latest"}, "ckpt-000000010.h5", 20},
      {"after-latest", {fmt_step(10), fmt_step(20), "latest"}, "ckpt-000000020.h5", 20},
  };
  for (const Window& w : windows) {
    SCOPED_TRACE(w.point);
    const fs::path run = dir / w.point;
    ::setenv("RINGTRAIN_TEST_CRASH", (std::string(w.point) + "@20").c_str(), 1);
    const CommandResult crashed = train(
        2, run, {"--set", "train.max_steps=30", "--set", "checkpoint.every_steps=10", "--set", "checkpoint.keep=1"});
    ::unsetenv("RINGTRAIN_TEST_CRASH");
    for (const auto& [rank, pid] : rank_pids(run.string())) ::kill(pid, SIGKILL);  // never leave strays
    EXPECT_NE(crashed.exit_code, 0) << crashed.output;
    EXPECT_EQ(crashed.output.find("checkpoint: " + ckpt(run, 20)), std::string::npos) << "the save finished";
    std::set<std::string> files;
    for (const auto& entry : fs::directory_iterator(run / "checkpoints"))
      if (entry.path().filename() != ".lock") files.insert(entry.path().filename().string());
    EXPECT_EQ(files, w.files);
    EXPECT_EQ(latest_of(run), w.latest);
    for (const std::string& name : files) {
      if (!name.ends_with(".h5")) continue;
      const CommandResult check = inspect((run / "checkpoints" / name).string());
      EXPECT_EQ(check.exit_code, 0) << name << ": " << check.output;
    }
    const CommandResult resumed = train(2, run, {"--set", "train.max_steps=30", "--set", "train.resume=auto"});
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resume: " + ckpt(run, w.resumed_step) + " at step " +
                                  std::to_string(w.resumed_step) + " "),
              std::string::npos)
        << resumed.output;
    EXPECT_FALSE(fs::exists(run / "checkpoints" / (fmt_step(20) + ".tmp")));
    EXPECT_EQ(latest_of(run), fmt_step(30));
  }
}

// A fresh start (train.resume = "none") in a directory holding another run's checkpoints, and
// a resume from an older checkpoint file with later ones in the directory, refuse before
// anything is written (the earlier run's config.toml and checkpoints stay) and name the ways
// on; with checkpoint.overwrite = true they delete them, saying so.
TEST(CheckpointDirs, AFreshStartOrAnOlderResumeRefusesToOverwriteCheckpoints) {
  const fs::path dir = fresh_dir("overwrite");
  const fs::path run = dir / "run";
  const std::vector<std::string> first = {"--set", "train.max_steps=10", "--set", "checkpoint.every_steps=5"};
  const CommandResult made = train(2, run, first);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string config = read_text(run / "config.toml");

  const CommandResult fresh = train(2, run, {"--set", "train.max_steps=3"});
  EXPECT_EQ(fresh.exit_code, 1) << fresh.output;
  EXPECT_NE(fresh.output.find("ringtrain: error: checkpoint.dir: " + (run / "checkpoints").string() +
                              " holds 2 checkpoints (" + ckpt(run, 10) + " ... " + ckpt(run, 5) +
                              ") that a fresh start (train.resume = \"none\") would overwrite; to continue that run: "
                              "--set train.resume=auto; to keep them: another run.dir or checkpoint.dir; to delete "
                              "them: --set checkpoint.overwrite=true"),
            std::string::npos)
      << fresh.output;
  EXPECT_EQ(fresh.output.find("epoch 1/"), std::string::npos) << "training started:\n" << fresh.output;
  EXPECT_TRUE(fs::exists(ckpt(run, 10)));
  EXPECT_EQ(read_text(run / "config.toml"), config) << "the earlier run's config.toml was replaced";

  const CommandResult older = train(2, run, {"--set", "train.max_steps=8", "--set", "train.resume=" + ckpt(run, 5)});
  EXPECT_EQ(older.exit_code, 1) << older.output;
  EXPECT_NE(older.output.find("holds 1 checkpoint (" + ckpt(run, 10) + ") that continuing from step 5 (" +
                              ckpt(run, 5) + ") would overwrite"),
            std::string::npos)
      << older.output;
  EXPECT_TRUE(fs::exists(ckpt(run, 10)));

  const CommandResult overwrite = train(2, run, {"--set", "train.max_steps=3", "--set", "checkpoint.overwrite=true"});
  ASSERT_EQ(overwrite.exit_code, 0) << overwrite.output;
  EXPECT_NE(overwrite.output.find("checkpoint: removing " + ckpt(run, 10) + " (checkpoint.overwrite = true)"),
            std::string::npos)
      << overwrite.output;
  EXPECT_FALSE(fs::exists(ckpt(run, 10)));
  EXPECT_FALSE(fs::exists(ckpt(run, 5)));
  EXPECT_EQ(latest_of(run), fmt_step(3));
}

// A second run on a checkpoint directory in use stops at start, naming the holder, and leaves
// the first run's files alone; the lock goes with the first run however it ends (SIGKILL here).
TEST(CheckpointDirs, ASecondRunOnTheSameDirectoryStopsAtStart) {
  const fs::path dir = fresh_dir("lock");
  const fs::path run = dir / "run";
  auto job = std::async(std::launch::async, [&] {
    return train(2, run, {"--set", "train.epochs=50", "--set", "checkpoint.every_steps=5"});
  });
  const auto start = Clock::now();
  while (lines_in(run / "metrics.jsonl") < 2 && Clock::now() - start < std::chrono::seconds(90))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const CommandResult second = train(2, run, {"--set", "train.max_steps=3", "--set", "train.resume=auto"});
  // Its own checkpoints, or none, would still mix its records with the first's in run.dir.
  const CommandResult beside =
      train(2, run, {"--set", "train.max_steps=3", "--set", "checkpoint.dir=" + (dir / "other-checkpoints").string()});
  const CommandResult unsaved = train(2, run, {"--set", "train.max_steps=3", "--set", "checkpoint.enabled=false"});
  const auto pids = rank_pids(run.string());
  for (const auto& [rank, pid] : pids) ::kill(pid, SIGKILL);
  job.get();
  for (const CommandResult* r : {&second, &beside, &unsaved}) {
    EXPECT_EQ(r->exit_code, 1) << r->output;
    EXPECT_NE(r->output.find("ringtrain: error: run.dir: " + run.string() + " is in use by another run (host "),
              std::string::npos)
        << r->output;
    EXPECT_NE(r->output.find(", pid " + std::to_string(pids.empty() ? 0 : pids.begin()->second) + ", since "),
              std::string::npos)
        << r->output;
  }
  // Killed, the first run holds nothing: the directory is free to continue it.
  const CommandResult after = train(2, run, {"--set", "train.max_steps=12", "--set", "train.resume=auto"});
  EXPECT_EQ(after.exit_code, 0) << after.output;
  EXPECT_NE(after.output.find("resume: "), std::string::npos) << after.output;
  EXPECT_NE(after.output.find("resume: changed since the checkpoint: train.epochs = 3 (the checkpoint's: 50), "
                              "train.max_steps = 12 (the checkpoint's: 0)"),
            std::string::npos)
      << after.output;
}

// `auto` skips a damaged newest checkpoint and never deletes it: a save of an earlier step
// leaves it (saying so once) and prunes only up to its own step.
TEST(CheckpointDirs, ADamagedLaterCheckpointIsSkippedNotDeleted) {
  const fs::path dir = fresh_dir("damaged-later");
  const fs::path run = dir / "run";
  const CommandResult made = train(2, run, {"--set", "train.max_steps=30", "--set", "checkpoint.every_steps=10"});
  ASSERT_EQ(made.exit_code, 0) << made.output;
  flip_data_byte(ckpt(run, 30), "params");
  const CommandResult resumed = train(2, run,
                                      {"--set", "train.max_steps=26", "--set", "checkpoint.every_steps=2", "--set",
                                       "checkpoint.keep=1", "--set", "train.resume=auto"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resume: " + ckpt(run, 20) + " at step 20"), std::string::npos) << resumed.output;
  const std::string leaving = "checkpoint: leaving " + ckpt(run, 30) + ": a later step";
  const auto at = resumed.output.find(leaving);
  EXPECT_NE(at, std::string::npos) << resumed.output;
  EXPECT_EQ(resumed.output.find(leaving, at + 1), std::string::npos) << "said more than once:\n" << resumed.output;
  EXPECT_TRUE(fs::exists(ckpt(run, 30)));
  EXPECT_TRUE(fs::exists(ckpt(run, 26)));
  EXPECT_FALSE(fs::exists(ckpt(run, 24)));
  EXPECT_FALSE(fs::exists(ckpt(run, 20)));
}

// A stop without a checkpoint (a signal with checkpoint.enabled = false) exits 1, not the 75
// that makes jobs/preemptible.sbatch requeue the run to start from step 0 again; exit_at_step
// without checkpoints is refused at start.
TEST(CheckpointStops, AStopWithoutACheckpointIsNotResumable) {
  const fs::path dir = fresh_dir("stop-without");
  const fs::path run = dir / "run";
  auto job = std::async(std::launch::async, [&] {
    return train(2, run,
                 {"--set", "train.epochs=50", "--set", "train.log_every=1", "--set", "checkpoint.enabled=false"});
  });
  const auto start = Clock::now();
  while (lines_in(run / "metrics.jsonl") < 3 && Clock::now() - start < std::chrono::seconds(90))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto pids = rank_pids(run.string());
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(::kill(pids.at(1), SIGTERM), 0);
  const CommandResult r = job.get();
  for (const auto& [rank, pid] : rank_pids(run.string())) ::kill(pid, SIGKILL);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("without a checkpoint (checkpoint.enabled = false): nothing to continue from (exit code 1)"),
            std::string::npos)
      << r.output;

  const CommandResult refused = train(2, run, {"--set", "train.exit_at_step=5", "--set", "checkpoint.enabled=false"});
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("train.exit_at_step = 5 stops the run with exit 75 to be continued, but "
                                "checkpoint.enabled = false leaves nothing to continue from"),
            std::string::npos)
      << refused.output;
}

// Runs `ringtrain train` expecting exit status 1 and `expected` in its output.
void expect_error(int ranks, const fs::path& run, const std::vector<std::string>& extra, const std::string& expected) {
  const CommandResult r = train(ranks, run, extra);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(expected), std::string::npos) << "expected '" << expected << "' in:\n" << r.output;
  EXPECT_EQ(r.output.find("epoch 1/"), std::string::npos) << "training started:\n" << r.output;
}

TEST(CheckpointErrors, BadCheckpointsAndDirectoriesGiveOneClearLine) {
  const fs::path dir = fresh_dir("errors");
  const CommandResult made = train(2, dir / "good", {"--set", "train.max_steps=3"});
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string good = ckpt(dir / "good", 3);
  for (int ranks : {1, 2}) {
    const fs::path run = dir / ("run-np" + std::to_string(ranks));
    // Another model (the CNN example): the dataset and both shapes are named.
    const CommandResult r =
        run_ringtrain(ranks, {"train", std::string(RINGTRAIN_SOURCE_DIR) + "/examples/fashion_mnist/cnn.toml", "--set",
                              "data.train=" + (data_dir() / "train.h5").string(), "--set", "data.test=", "--set",
                              "run.dir=" + run.string(), "--set", "train.resume=" + good});
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("dataset 'params' has shape [535818] but this run needs [421642]"), std::string::npos)
        << r.output;

    // The same number of parameters in other shapes (two widths traded): named, not read.
    expect_error(
        ranks, run,
        {"--set", "train.resume=" + good, "--set", "model.layers[1].out=336", "--set", "model.layers[3].out=784"},
        "written by another model (model.layers[1].out = 336 here, 512 in the checkpoint; "
        "model.layers[3].out = 784 here, 256 in the checkpoint)");

    const std::string flipped = (dir / "flipped.h5").string();
    fs::copy_file(good, flipped, fs::copy_options::overwrite_existing);
    flip_data_byte(flipped, "optimizer/velocity");
    expect_error(ranks, run, {"--set", "train.resume=" + flipped}, "dataset 'optimizer/velocity': checksum mismatch");

    const std::string truncated = (dir / "truncated.h5").string();
    fs::copy_file(good, truncated, fs::copy_options::overwrite_existing);
    truncate_to_half(truncated);
    expect_error(ranks, run, {"--set", "train.resume=" + truncated}, "truncated file");

    const std::string text = (dir / "not-hdf5.h5").string();
    std::ofstream(text) << "not a checkpoint\n";
    expect_error(ranks, run, {"--set", "train.resume=" + text}, "not-hdf5.h5");

    expect_error(ranks, run, {"--set", "train.resume=" + (dir / "missing.h5").string()},
                 "missing.h5: no such checkpoint");

    const std::string newer = (dir / "newer.h5").string();
    fs::copy_file(good, newer, fs::copy_options::overwrite_existing);
    {
      const hid_t file = H5Fopen(newer.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      ASSERT_GE(file, 0);
      const hid_t attr = H5Aopen(file, "format_version", H5P_DEFAULT);
      const std::int64_t version = 99;
      ASSERT_GE(H5Awrite(attr, H5T_NATIVE_INT64, &version), 0);
      H5Aclose(attr);
      H5Fclose(file);
    }
    expect_error(ranks, run, {"--set", "train.resume=" + newer}, "checkpoint format version 99 is not readable");

    // A directory that cannot be created fails at start, before any training.
    const fs::path blocker = dir / "a-file";
    std::ofstream(blocker) << "x\n";
    expect_error(ranks, run, {"--set", "checkpoint.dir=" + (blocker / "ckpts").string()}, "checkpoint.dir: ");
  }
}

// Replaces root attribute `name` of a checkpoint by one of file type `type`, shape `dims` (empty:
// a scalar) and contents `data`, as a crafted or damaged file may hold it.
void replace_attr(const std::string& path, const char* name, hid_t type, const std::vector<hsize_t>& dims,
                  const void* data) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  ASSERT_GE(H5Adelete(file, name), 0) << name;
  const hid_t space =
      dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t attr = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(attr, 0) << name;
  EXPECT_GE(H5Awrite(attr, type, data), 0) << name;
  H5Aclose(attr);
  H5Sclose(space);
  H5Fclose(file);
}

template <typename T>
void replace_scalar(const std::string& path, const char* name, hid_t type, T value) {
  replace_attr(path, name, type, {}, &value);
}

struct HostileMeta {
  std::function<void(const std::string&)> damage;
  std::string expected;  // the error after "<path>: damaged checkpoint metadata: "
};

std::vector<HostileMeta> hostile_metas() {
  return {
      {[](const std::string& p) {
         const std::vector<std::int64_t> steps(1000, 20);
         replace_attr(p, "step", H5T_STD_I64LE, {1000}, steps.data());
       },
       "attribute 'step' has shape [1000], expected a scalar"},
      {[](const std::string& p) {
         const hid_t type = H5Tcopy(H5T_C_S1);
         H5Tset_size(type, H5T_VARIABLE);
         const std::vector<const char*> names(1000, "sgd");
         replace_attr(p, "optimizer", type, {1000}, names.data());
         H5Tclose(type);
       },
       "attribute 'optimizer' has shape [1000], expected a scalar"},
      {[](const std::string& p) { replace_scalar<std::uint64_t>(p, "step", H5T_STD_U64LE, ~std::uint64_t{0}); },
       "attribute 'step' holds 18446744073709551615, outside the range of int64"},
      {[](const std::string& p) { replace_scalar<std::int64_t>(p, "step", H5T_STD_I64LE, -5); },
       "attribute 'step' is -5, expected >= 0"},
      {[](const std::string& p) { replace_scalar<std::int64_t>(p, "global_batch", H5T_STD_I64LE, 0); },
       "attribute 'global_batch' is 0, expected >= 1"},
      {[](const std::string& p) { replace_scalar<std::int64_t>(p, "world_size", H5T_STD_I64LE, -1); },
       "attribute 'world_size' is -1, expected >= 1"},
      {[](const std::string& p) { replace_scalar<std::int64_t>(p, "skipped_steps", H5T_STD_I64LE, 21); },
       "attribute 'skipped_steps' is 21, more than the 20 steps taken"},
      {[](const std::string& p) { replace_scalar<std::int64_t>(p, "format_version", H5T_STD_I64LE, 0); },
       "attribute 'format_version' is 0, expected >= 1"},
      {[](const std::string& p) {
         replace_scalar<double>(p, "loss_scale", H5T_IEEE_F64LE, std::numeric_limits<double>::quiet_NaN());
       },
       "attribute 'loss_scale' is nan, expected a finite value > 0"},
      // A value every range check accepts: only the metadata checksum tells it from the one written.
      {[](const std::string& p) { replace_scalar<std::int64_t>(p, "step", H5T_STD_I64LE, 21); },
       "attribute 'meta_checksum' does not match the other root attributes (one was changed after the write)"},
  };
}

TEST(CheckpointErrors, HostileMetadataGivesOneLineAndResumeSkipsIt) {
  const fs::path dir = fresh_dir("hostile");
  const fs::path run = dir / "run";
  const std::vector<std::string> steps = {"--set", "train.max_steps=20", "--set", "checkpoint.every_steps=10"};
  const CommandResult made = train(1, run, steps);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string newest = ckpt(run, 20);
  const std::string intact = (dir / "intact.h5").string();
  fs::copy_file(newest, intact);
  const std::vector<HostileMeta> hostile = hostile_metas();
  for (const HostileMeta& h : hostile) {
    SCOPED_TRACE(h.expected);
    const std::string bad = (dir / "bad.h5").string();
    fs::copy_file(intact, bad, fs::copy_options::overwrite_existing);
    h.damage(bad);
    const CommandResult r = inspect(bad);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output, "ringtrain: error: " + bad + ": damaged checkpoint metadata: " + h.expected + "\n");
  }
  // A dataset declared far larger than the file (chunked, never written) is named, never allocated.
  {
    const std::string bad = (dir / "huge-params.h5").string();
    fs::copy_file(intact, bad, fs::copy_options::overwrite_existing);
    const hid_t file = H5Fopen(bad.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    ASSERT_GE(H5Ldelete(file, "params", H5P_DEFAULT), 0);
    const hsize_t dims = hsize_t{1} << 40, chunk = 1;
    const hid_t space = H5Screate_simple(1, &dims, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    EXPECT_GE(H5Pset_chunk(dcpl, 1, &chunk), 0);
    const hid_t dset = H5Dcreate2(file, "params", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    EXPECT_GE(dset, 0);
    const hid_t scalar = H5Screate(H5S_SCALAR);  // a checksum, so that reading goes on to the data
    const hid_t checksum = H5Acreate2(dset, "checksum", H5T_STD_U64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    const std::uint64_t zero = 0;
    EXPECT_GE(H5Awrite(checksum, H5T_NATIVE_UINT64, &zero), 0);
    H5Aclose(checksum);
    H5Sclose(scalar);
    H5Dclose(dset);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(file);
    const CommandResult r = inspect(bad);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output.rfind("ringtrain: error: " + bad +
                                 ": dataset 'params' has shape [1099511627776], more floats than the whole file (",
                             0),
              0u)
        << r.output;
    EXPECT_EQ(lines_of(r.output).size(), 1u) << r.output;
  }
  // `auto` passes over a newest checkpoint with such metadata to the one before it.
  for (const HostileMeta* h : {&hostile[0], &hostile[hostile.size() - 2], &hostile.back()}) {
    SCOPED_TRACE(h->expected);
    fs::copy_file(intact, newest, fs::copy_options::overwrite_existing);
    h->damage(newest);
    std::vector<std::string> resume = steps;
    resume.insert(resume.end(), {"--set", "train.resume=auto"});
    const CommandResult resumed = train(1, run, resume);
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("skipping a damaged checkpoint: " + newest +
                                  ": damaged checkpoint metadata: " + h->expected),
              std::string::npos)
        << resumed.output;
    EXPECT_NE(resumed.output.find("resume: " + ckpt(run, 10) + " at step 10"), std::string::npos) << resumed.output;
  }
}

// A user checks a checkpoint with common tools only, exactly as docs/CHECKPOINT.md ("Checking a
// checkpoint with h5dump and xxhsum") says: h5dump's raw bytes of a dataset, split into 1 MiB
// blocks, `xxhsum -H3` of each, the digests concatenated as bytes, `xxhsum -H3` of those. That
// is the checksum `ckpt inspect` prints, for every dataset of a checkpoint written by 2 ranks.
TEST(CheckpointChecksums, XxhsumOfH5dumpsBlocksIsWhatInspectPrints) {
  for (const char* tool : {"h5dump", "xxhsum", "split", "basenc"})
    ASSERT_EQ(run_command(std::string("command -v ") + tool).exit_code, 0)
        << tool << " not found (tools/install-deps installs it)";
  const fs::path dir = fresh_dir("xxhsum");
  const fs::path run = dir / "run";
  const CommandResult made = train(2, run, {"--set", "train.max_steps=10", "--set", "checkpoint.every_steps=10"});
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string file = ckpt(run, 10);
  const CommandResult shown = inspect(file);
  ASSERT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_NE(shown.output.find("checksums:  xxh3-64 (1 MiB blocks"), std::string::npos) << shown.output;
  // "  /params                   [535818]  checksum 0123456789abcdef  ok"
  const std::regex dataset_line(R"(^  /(\S+) +\[[0-9, ]+\]  checksum ([0-9a-f]{16})  ok$)");
  std::map<std::string, std::string> printed;
  for (const std::string& line : lines_of(shown.output)) {
    std::smatch m;
    if (std::regex_match(line, m, dataset_line)) printed[m[1]] = m[2];
  }
  ASSERT_TRUE(printed.count("params")) << shown.output;
  ASSERT_TRUE(printed.count("optimizer/velocity")) << shown.output;
  for (const auto& [name, checksum] : printed) {
    SCOPED_TRACE(name);
    const fs::path work = dir / ("check-" + std::to_string(std::hash<std::string>{}(name)));
    fs::create_directories(work);
    const std::string procedure = "set -euo pipefail; cd " + shell_quote(work.string()) + "; f=" + shell_quote(file) +
                                  " d=" + shell_quote(name) +
                                  R"(
h5dump -d "/$d" -b LE -o data.bin "$f" > /dev/null
split -b 1048576 -a 6 -d data.bin block.
xxhsum -q -H3 block.* | sed 's/.* = //' | tr -d '\n' | tr a-f A-F | basenc --base16 -d > digests.bin
xxhsum -q -H3 digests.bin | sed 's/.* = //')";
    const CommandResult r = run_command("bash -c " + shell_quote(procedure));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output, checksum + "\n");
    const auto blocks = (fs::file_size(work / "data.bin") + (1 << 20) - 1) >> 20;
    EXPECT_EQ(fs::file_size(work / "digests.bin"), 8 * blocks);
    if (name == "params") EXPECT_GE(blocks, 2u) << "the parameters span several blocks (and both ranks)";
  }
}

// A full file system during a save: the save fails with a clear line, its temporary file is
// gone and the previous checkpoint is intact. Needs a small tmpfs (root may mount one).
TEST(CheckpointErrors, FullDiskKeepsThePreviousCheckpoint) {
  const fs::path dir = fresh_dir("full-disk");
  const fs::path mnt = dir / "small";
  fs::create_directories(mnt);
  // One checkpoint (about 5 MB) fits, a second one next to it does not.
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=8m") != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root with CAP_SYS_ADMIN): " << std::strerror(errno);
  struct Unmount {
    fs::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  const CommandResult r = train(2, dir / "run",
                                {"--set", "train.max_steps=30", "--set", "checkpoint.every_steps=10", "--set",
                                 "checkpoint.keep=1", "--set", "checkpoint.dir=" + mnt.string()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("checkpoint at step 20 failed: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(mnt.string() + "/ckpt-000000010.h5 is intact"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(mnt / "ckpt-000000020.h5.tmp"));
  EXPECT_EQ(read_text(mnt / "latest"), "ckpt-000000010.h5\n");
  const CommandResult check = inspect((mnt / "ckpt-000000010.h5").string());
  EXPECT_EQ(check.exit_code, 0) << check.output;
}

}  // namespace
}  // namespace ringtrain::test
