// The data pipeline through the real executable, on files the test writes: every bad dataset
// of issue #3 ends 1 and 2 ranks with one "ringtrain: error:" line naming the file and the
// problem (no hang, no crash); a read error on a loader thread ends the run naming the file and
// samples; prefetch on and off, stream or memory, many files or one give bitwise the same
// parameters; data_wait is recorded.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <thread>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "integration/run_command.hpp"
#include "unit/data/h5_files.hpp"

namespace ringtrain::test {
namespace {

namespace fs = std::filesystem;

const fs::path& work_dir() {
  static const fs::path dir = fresh_temp_dir("ringtrain-data-pipeline");
  return dir;
}

std::string at(const std::string& name) { return (work_dir() / name).string(); }

// A small run: linear model on [1, 8, 8] samples, augmented, a few steps.
std::string write_config(const std::string& name, const std::string& train, const std::string& test = "") {
  std::string path = at(name + ".toml");
  std::ofstream(path) << "[run]\ndir = \"" << at("run-" + name) << "\"\n"
                      << "[train]\nepochs = 2\nbatch_size = 16\nmax_steps = 20\nlog_every = 5\nseed = 3\n"
                      << "[data]\ntrain = " << train << "\ntest = \"" << test << "\"\n"
                      << "[data.augment]\ncrop_padding = 2\nflip = true\n"
                      << "[optim]\nlr = 0.05\nmomentum = 0.9\n"
                      << "[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n";
  return path;
}

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

const std::string kNewerFormat = std::string(RINGTRAIN_SOURCE_DIR) + "/tests/data/hdf5-2.0/vds-libver-latest.h5";

struct BadCase {
  std::string name;
  std::string train;                  // the data.train value (TOML)
  std::vector<std::string> expected;  // parts of the error line
};

std::vector<BadCase> bad_cases() {
  write_u8_file(at("good.h5"), 0, 64, 1, 8, 8, 16);
  test::write_u8_file(at("truncated.h5"), 0, 400, 1, 8, 8);
  truncate_file(at("truncated.h5"), fs::file_size(at("truncated.h5")) / 3);
  std::ofstream(at("text.h5")) << "not hdf5\n";
  write_u8_file(at("damaged.h5"), 0, 64, 1, 8, 8);
  overwrite_bytes(at("damaged.h5"), 96, 1000, '\x7f');
  write_u8_file(at("other-shape.h5"), 64, 32, 1, 8, 9);
  {
    H5FileWriter mismatch(at("mismatch.h5"));
    mismatch.add<std::uint8_t>("images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {64, 1, 8, 8},
                               std::vector<std::uint8_t>(4096, 1));
    mismatch.add<std::uint8_t>("labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {60}, std::vector<std::uint8_t>(60, 1));
    H5FileWriter empty(at("empty.h5"));
    empty.add<std::uint8_t>("images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {0, 1, 8, 8}, {});
    empty.add<std::uint8_t>("labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {0}, {});
    H5FileWriter bits(at("bitfield.h5"));
    bits.add<std::uint8_t>("images", H5T_STD_B8LE, H5T_NATIVE_B8, {64, 1, 8, 8}, std::vector<std::uint8_t>(4096, 1));
    bits.add<std::uint8_t>("labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {64}, std::vector<std::uint8_t>(64, 1));
    std::vector<float> v = sample_values<float>(0, 64, 64);
    v[40 * 64 + 9] = std::numeric_limits<float>::quiet_NaN();
    H5FileWriter nan(at("nan.h5"));
    nan.samples<float>(0, {64, 1, 8, 8}, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT);
    nan.add("images-nan", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {64, 1, 8, 8}, v);
  }
  return {
      {"missing", quoted(at("absent.h5")), {"data.train", at("absent.h5"), "no such file"}},
      {"truncated", quoted(at("truncated.h5")), {"data.train", at("truncated.h5"), "truncated file"}},
      {"not hdf5", quoted(at("text.h5")), {"data.train", at("text.h5"), "not an HDF5 file"}},
      {"unreadable", quoted(at("damaged.h5")), {"data.train", at("damaged.h5") + ": HDF5 cannot open it: "}},
      {"glob matching nothing", quoted(at("shard-*.h5")), {"data.train", at("shard-*.h5"), "no files match"}},
      {"differing schemas",
       "[" + quoted(at("good.h5")) + ", " + quoted(at("other-shape.h5")) + "]",
       {"data.train", at("other-shape.h5"), "[1, 8, 9]", at("good.h5"), "[1, 8, 8]"}},
      {"first dimensions differ", quoted(at("mismatch.h5")), {at("mismatch.h5"), "64 samples but 'labels' has 60"}},
      {"empty", quoted(at("empty.h5")), {at("empty.h5"), "empty (0 samples)"}},
      {"unsupported dtype", quoted(at("bitfield.h5")), {at("bitfield.h5"), "unsupported dtype bitfield"}},
      // A virtual dataset h5py 3.16 (HDF5 2.0) wrote with libver='latest' (tests/data/hdf5-2.0):
      // HDF5's own message, and which HDF5 this is and what to do.
      {"newer HDF5 format",
       quoted(kNewerFormat),
       {"data.train", kNewerFormat, "bad version number for hyperslab selection (this is HDF5 ", "libver='v110'"}},
  };
}

class BadData : public ::testing::TestWithParam<int> {};

TEST_P(BadData, OneLineNamingFileAndProblemOnEveryRank) {
  const int ranks = GetParam();
  for (const auto& c : bad_cases()) {
    SCOPED_TRACE(c.name + " on " + std::to_string(ranks) + " rank(s)");
    const auto r = run_ringtrain(ranks, {"train", write_config("bad", c.train)}, 60);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_LT(r.exit_code, 124) << "timed out or killed by a signal:\n" << r.output;
    const auto lines = error_lines(r.output);
    ASSERT_EQ(lines.size(), 1u) << r.output;
    for (const auto& e : c.expected)
      EXPECT_NE(lines[0].find(e), std::string::npos) << "missing '" << e << "' in: " << lines[0];
    EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << "should end collectively:\n" << r.output;
  }
  // NaN in float samples: an error by default, left out with data.nonfinite = "skip".
  const std::string nan = write_config("nan", quoted(at("nan.h5")));
  const auto fail = run_ringtrain(ranks, {"train", nan, "--set", "data.images_key=images-nan"}, 60);
  EXPECT_NE(fail.exit_code, 0);
  const auto lines = error_lines(fail.output);
  ASSERT_EQ(lines.size(), 1u) << fail.output;
  EXPECT_NE(lines[0].find("data.train: " + at("nan.h5") + ": dataset 'images-nan': sample 40 holds NaN"),
            std::string::npos)
      << lines[0];
  // Skipped in the test set too (the same file), and counted for each set in the "data:" line.
  const std::string nan_both = write_config("nan-both", quoted(at("nan.h5")), at("nan.h5"));
  const auto skip = run_ringtrain(ranks,
                                  {"train", nan_both, "--set", "data.images_key=images-nan", "--set",
                                   "data.nonfinite=skip", "--set", "checkpoint.enabled=false"},  // the same run.dir
                                  60);                                                           // on every rank count
  EXPECT_EQ(skip.exit_code, 0) << skip.output;
  EXPECT_NE(skip.output.find("train 64 samples (1 with NaN/Inf skipped) float32"), std::string::npos) << skip.output;
  EXPECT_NE(skip.output.find(", test 64 samples (1 with NaN/Inf skipped)"), std::string::npos) << skip.output;
}

INSTANTIATE_TEST_SUITE_P(Ranks, BadData, ::testing::Values(1, 2));

// A data file written to while a stream run reads it (here: bytes of its sample chunks
// overwritten in place, or bytes appended) ends the run with one line at the next read,
// instead of training on a mix of old and new data or reading by a shape that changed.
TEST(FileChangedDuringARun, EndsTheRunAtTheNextRead) {
  for (const bool grow : {false, true}) {
    SCOPED_TRACE(grow ? "grown" : "overwritten");
    const std::string name = grow ? "grown" : "overwritten";
    const std::string file = at(name + ".h5");
    write_u8_file(file, 0, 480, 1, 8, 8, 32);
    const std::string config = write_config(name, quoted(file));
    auto job = std::async(std::launch::async, [&] {
      return run_ringtrain(2,
                           {"train", config, "--set", "data.strategy=stream", "--set", "train.epochs=100000", "--set",
                            "train.max_steps=0", "--set", "train.log_every=1", "--set", "checkpoint.enabled=false"},
                           120);
    });
    const auto start = std::chrono::steady_clock::now();
    while (lines_in(at("run-" + name) + "/metrics.jsonl") < 3 &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(60))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (grow) {
      std::ofstream(file, std::ios::app | std::ios::binary) << std::string(4096, 'x');
    } else {
      overwrite_bytes(file, chunk_address(file, "images", 64), 64, '\x5a');
    }
    const CommandResult r = job.get();
    EXPECT_EQ(r.exit_code, 1) << r.output;
    // Each rank finds it on its own loader thread (one line per rank that got there first).
    const auto lines = error_lines(r.output);
    ASSERT_FALSE(lines.empty()) << r.output;
    EXPECT_NE(lines[0].find("data.train: " + file + ": the file changed since the run opened it (" +
                            (grow ? std::string("its size went from ") : std::string("it was modified"))),
              std::string::npos)
        << lines[0];
  }
}

TEST(LoaderThreadError, EndsTheRunNamingFileAndSamples) {
  // A deflated chunk overwritten with garbage: found only while streaming (after set-up).
  const std::string file = at("bad-chunk.h5");
  write_u8_file(file, 0, 256, 1, 8, 8, 32, true);
  overwrite_bytes(file, chunk_address(file, "images", 128), 64, '\x5a');
  const auto r = run_ringtrain(
      2,
      {"train", write_config("bad-chunk", quoted(file)), "--set", "data.strategy=stream", "--set", "train.max_steps=0"},
      60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 124) << "timed out or killed by a signal:\n" << r.output;
  const auto lines = error_lines(r.output);
  ASSERT_FALSE(lines.empty()) << r.output;
  EXPECT_NE(lines[0].find("data.train: " + file + ": dataset 'images', samples 128-159: H5Dread"), std::string::npos)
      << lines[0];
}

nlohmann::json summary_of(const std::string& name) {
  std::ifstream in(at("run-" + name) + "/summary.json");
  return nlohmann::json::parse(in);
}

// Trains with the given overrides on 2 ranks; the summary, or a failure with the output.
nlohmann::json train(const std::string& name, const std::string& data_train, const std::vector<std::string>& sets) {
  std::vector<std::string> args = {"train", write_config(name, data_train, at("one.h5"))};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  const auto r = run_ringtrain(2, args, 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return summary_of(name);
}

TEST(TrainingResults, IdenticalWithPrefetchOnOrOffAndFromManyFiles) {
  // Chunks of 32 in every file, so the stream strategy sees the same blocks in both layouts.
  write_u8_file(at("one.h5"), 0, 480, 1, 8, 8, 32);
  write_u8_file(at("part-0.h5"), 0, 160, 1, 8, 8, 32);
  write_u8_file(at("part-1.h5"), 160, 320, 1, 8, 8, 32);
  const std::string one = quoted(at("one.h5")), many = quoted(at("part-*.h5"));
  for (const std::string strategy : {"memory", "stream"}) {
    SCOPED_TRACE(strategy);
    const std::string st = "data.strategy=" + strategy;
    const auto sync = train(strategy + "-sync", one, {st, "data.prefetch=0"});
    const auto ahead = train(strategy + "-ahead", one, {st, "data.prefetch=3", "data.read_ahead=2"});
    const auto files = train(strategy + "-files", many, {st, "data.prefetch=1"});
    EXPECT_EQ(sync["steps"], 20);
    EXPECT_EQ(sync["data_strategy"], strategy);
    EXPECT_EQ(sync["param_checksum"], ahead["param_checksum"]);
    EXPECT_EQ(sync["param_checksum"], files["param_checksum"]);
    EXPECT_EQ(sync["final_test_accuracy"], ahead["final_test_accuracy"]);
    EXPECT_TRUE(ahead.contains("median_data_wait_ms"));
  }
  std::ifstream metrics(at("run-memory-ahead") + "/metrics.jsonl");
  int steps = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] != "step") continue;
    ++steps;
    EXPECT_GE(j["data_wait_ms"].get<double>(), 0.0);
  }
  EXPECT_EQ(steps, 4);  // every 5 of 20 steps
}

}  // namespace
}  // namespace ringtrain::test
