// Ranks that disagree (issue 19 item 3): each rank's command line, working directory, view of
// the file system or data files may differ on a cluster. What must be one training is compared
// at start and a difference is one line naming the rank and host, never a hang or two runs in
// one. The per-rank views are made with MPMD launches (`mpirun A : B`) and with each rank in a
// mount namespace of its own (`unshare -m`, needs root with CAP_SYS_ADMIN as CI has; skipped
// otherwise): a tmpfs over the checkpoint directory stands for a node-local disk, a bind mount
// over a data file for a node that sees another file under the same path.
#include <gtest/gtest.h>

#include <fstream>

#include "integration/run_command.hpp"

namespace ringtrain::test {
namespace {

namespace fs = std::filesystem;

const fs::path kData = RINGTRAIN_DATA_DIR;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "ringtrain-rank-agreement" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<std::string> train_args(const fs::path& run, const std::string& data_train) {
  return {"train", std::string(RINGTRAIN_SOURCE_DIR) + "/examples/fashion_mnist/mlp.toml",
          "--set", "data.train=" + data_train,
          "--set", "data.test=",
          "--set", "train.max_steps=2",
          "--set", "run.dir=" + run.string()};
}

// `mpirun -np 1 [-wdir W0] ringtrain ARGS0 : -np 1 [-wdir W1] ringtrain ARGS1`
CommandResult run_mpmd(const std::vector<std::string>& args0, const std::vector<std::string>& args1,
                       const fs::path& wdir0 = {}, const fs::path& wdir1 = {}) {
  const auto part = [](const std::vector<std::string>& args, const fs::path& wdir) {
    std::string p = " -np 1";
    if (!wdir.empty()) p += " -wdir " + shell_quote(wdir.string());
    p += " " + shell_quote(RINGTRAIN_EXE);
    for (const auto& a : args) p += " " + shell_quote(a);
    return p;
  };
  return run_command("OMPI_MCA_odls_base_sigkill_timeout=0 timeout -k 5 120 " + shell_quote(RINGTRAIN_MPIEXEC) +
                     " --oversubscribe --allow-run-as-root --bind-to none --mca btl self,vader" + part(args0, wdir0) +
                     " :" + part(args1, wdir1));
}

// Each rank runs `script` (sh, with $OMPI_COMM_WORLD_RANK) in a mount namespace of its own, then ringtrain.
CommandResult run_in_own_namespaces(int ranks, const fs::path& dir, const std::string& script,
                                    const std::vector<std::string>& args) {
  const fs::path wrapper = dir / "own-namespace.sh";
  std::ofstream(wrapper) << "#!/bin/sh\nset -e\n" << script << "\nexec \"$@\"\n";
  fs::permissions(wrapper, fs::perms::owner_all);
  std::string cmd = ringtrain_command(ranks, args);
  const std::string exe = shell_quote(RINGTRAIN_EXE);
  cmd.replace(cmd.find(exe), exe.size(),
              "unshare -m --propagation private " + shell_quote(wrapper.string()) + " " + exe);
  return run_command(cmd);
}

bool own_namespaces_work() {
  return run_command("unshare -m --propagation private sh -c 'mount -t tmpfs tmpfs /mnt'").exit_code == 0;
}

void expect_one_error(const CommandResult& r, const std::string& expected) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(error_lines(r.output).size(), 1u) << r.output;
  EXPECT_NE(r.output.find(expected), std::string::npos) << "expected '" << expected << "' in:\n" << r.output;
  EXPECT_EQ(r.output.find("epoch 1/"), std::string::npos) << "training started:\n" << r.output;
}

TEST(RankAgreement, OverridesThatDifferBetweenRanksStopTheRun) {
  const fs::path dir = fresh_dir("overrides");
  std::vector<std::string> a = train_args(dir / "run", (kData / "train.h5").string());
  std::vector<std::string> b = a;
  a.insert(a.end(), {"--set", "train.seed=1"});
  b.insert(b.end(), {"--set", "train.seed=2"});
  expect_one_error(run_mpmd(a, b),
                   "ringtrain: error: the resolved config (config file, --set/--unset, defaults from the environment) "
                   "is not the same on every rank: rank 1 (host ");
}

TEST(RankAgreement, ARelativeRunDirInAnotherWorkingDirectoryStopsTheRun) {
  const fs::path dir = fresh_dir("wdir");
  fs::create_directories(dir / "w0");
  fs::create_directories(dir / "w1");
  std::vector<std::string> args = train_args("runs/relative", (kData / "train.h5").string());
  expect_one_error(run_mpmd(args, args, dir / "w0", dir / "w1"),
                   "ringtrain: error: run.dir and checkpoint.dir as absolute paths (each rank's working directory) "
                   "is not the same on every rank: rank 1 (host ");
}

TEST(RankAgreement, ANodeLocalCheckpointDirectoryStopsTheRun) {
  if (!own_namespaces_work()) GTEST_SKIP() << "cannot mount in a mount namespace of its own here (needs root)";
  const fs::path dir = fresh_dir("node-local");
  const fs::path checkpoints = dir / "run" / "checkpoints";
  fs::create_directories(checkpoints);
  const CommandResult r = run_in_own_namespaces(2, dir, "mount -t tmpfs tmpfs " + shell_quote(checkpoints.string()),
                                                train_args(dir / "run", (kData / "train.h5").string()));
  expect_one_error(r, "ringtrain: error: checkpoint.dir: " + checkpoints.string() + " on rank 1 (host ");
  EXPECT_NE(r.output.find("does not hold the file rank 0 just wrote there: checkpoints need a directory every rank "
                          "shares, not a node-local one"),
            std::string::npos)
      << r.output;
}

TEST(RankAgreement, ADataFileThatDiffersOnOneRankStopsTheRun) {
  if (!own_namespaces_work()) GTEST_SKIP() << "cannot mount in a mount namespace of its own here (needs root)";
  const fs::path dir = fresh_dir("data-file");
  const fs::path data = dir / "data.h5";
  fs::copy_file(kData / "test.h5", data);
  // Rank 1 sees the training set under the same path (10,000 samples on rank 0, 60,000 on rank 1).
  const std::string script = "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then mount --bind " +
                             shell_quote((kData / "train.h5").string()) + " " + shell_quote(data.string()) + "; fi";
  for (const std::string strategy : {"memory", "stream"}) {
    SCOPED_TRACE(strategy);
    std::vector<std::string> args = train_args(dir / ("run-" + strategy), data.string());
    args.insert(args.end(), {"--set", "data.strategy=" + strategy});
    expect_one_error(run_in_own_namespaces(2, dir, script, args),
                     "ringtrain: error: data.train: the dataset's files (paths, byte sizes, rows, sample shape and "
                     "type) is not the same on every rank: rank 1 (host ");
  }
}

}  // namespace
}  // namespace ringtrain::test
