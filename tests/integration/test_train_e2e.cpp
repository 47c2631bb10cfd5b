// End to end on real Fashion-MNIST: a 2-rank training run of the MLP example through the
// real executable; the loss must fall, accuracy must be far above chance, and the run
// records (metrics.jsonl, summary.json, config.toml) must be complete and consistent. And
// runtime.backend = "cuda" on a machine without a GPU: a warning, then the CPU run itself.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "integration/run_command.hpp"

namespace ringtrain::test {
namespace {

namespace fs = std::filesystem;

TEST(TrainEndToEnd, MlpTwoRanksLearnsFashionMnist) {
  const fs::path data = RINGTRAIN_DATA_DIR;
  ASSERT_TRUE(fs::exists(data / "train.h5")) << "fixture prepare_fashion_mnist did not run";
  const fs::path run_dir = fs::temp_directory_path() / "ringtrain-e2e-mlp";
  fs::remove_all(run_dir);
  const auto r =
      run_ringtrain(2,
                    {"train", std::string(RINGTRAIN_SOURCE_DIR) + "/examples/fashion_mnist/mlp.toml", "--set",
                     "data.train=" + (data / "train.h5").string(), "--set", "data.test=" + (data / "test.h5").string(),
                     "--set", "train.epochs=1", "--set", "train.log_every=50", "--set", "run.dir=" + run_dir.string()},
                    300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("test accuracy"), std::string::npos) << r.output;

  std::ifstream summary_file(run_dir / "summary.json");
  ASSERT_TRUE(summary_file.good());
  const auto summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(summary["world_size"], 2);
  EXPECT_EQ(summary["per_rank_batch"], 64);
  EXPECT_EQ(summary["global_batch"], 128);
  EXPECT_EQ(summary["steps"], 60000 / 128);
  EXPECT_EQ(summary["parameters"], 535818);
  EXPECT_GT(summary["final_test_accuracy"].get<double>(), 0.80);  // chance is 0.10
  EXPECT_GT(summary["train_samples_per_second"].get<double>(), 0.0);
  EXPECT_EQ(summary["param_checksum"].get<std::string>().size(), 16u);

  std::ifstream metrics(run_dir / "metrics.jsonl");
  std::vector<double> losses;
  int epochs = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "step") losses.push_back(j["loss"].get<double>());
    if (j["type"] == "epoch") ++epochs;
  }
  ASSERT_GE(losses.size(), 5u);
  EXPECT_EQ(epochs, 1);
  EXPECT_LT(losses.back(), 0.6 * losses.front()) << "loss did not fall";
  EXPECT_TRUE(fs::exists(run_dir / "config.toml"));
}

nlohmann::json short_mlp_run(const std::string& name, const std::vector<std::string>& extra, std::string* output) {
  const fs::path data = RINGTRAIN_DATA_DIR;
  const fs::path run_dir = fs::temp_directory_path() / name;
  fs::remove_all(run_dir);
  std::vector<std::string> args = {"train", std::string(RINGTRAIN_SOURCE_DIR) + "/examples/fashion_mnist/mlp.toml",
                                   "--set", "data.train=" + (data / "train.h5").string(),
                                   "--set", "data.test=" + (data / "test.h5").string(),
                                   "--set", "train.max_steps=20",
                                   "--set", "checkpoint.enabled=false",
                                   "--set", "run.dir=" + run_dir.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_ringtrain(2, args, 300);
  *output = r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream summary(run_dir / "summary.json");
  return summary.good() ? nlohmann::json::parse(summary) : nlohmann::json::object();
}

TEST(TrainEndToEnd, CudaBackendWithoutAGpuFallsBackToTheCpu) {
  std::string cpu_log, cuda_log;
  const auto cpu = short_mlp_run("ringtrain-e2e-cpu", {}, &cpu_log);
  const auto cuda =
      short_mlp_run("ringtrain-e2e-cuda", {"--set", "runtime.backend=cuda", "--set", "comm.allreduce=nccl"}, &cuda_log);
  ASSERT_TRUE(cpu.contains("param_checksum") && cuda.contains("param_checksum")) << cpu_log << cuda_log;
  if (cuda["backend"] == "cuda") GTEST_SKIP() << "a GPU is present: no fallback to test";
  EXPECT_NE(cuda_log.find("falling back to the CPU backend"), std::string::npos) << cuda_log;
  EXPECT_EQ(cuda["backend"], "cpu");
  // The fallback is the CPU backend itself: bitwise the same training as a CPU run.
  EXPECT_EQ(cuda["param_checksum"], cpu["param_checksum"]);
  EXPECT_EQ(cuda["final_test_accuracy"], cpu["final_test_accuracy"]);
}

}  // namespace
}  // namespace ringtrain::test
