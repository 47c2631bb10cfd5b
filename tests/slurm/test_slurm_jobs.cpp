// The job scripts in jobs/ on a real Slurm cluster: tools/slurm/local-cluster runs munged,
// slurmctld and two slurmd "nodes" (node1, node2) on this machine for the whole suite.
// Training through srun on 1 and 2 nodes and through mpirun, a job with a missing config, a
// failing and a silently "successful" launch, the scaling and allreduce scripts, every
// script outside Slurm, preemption (USR1, checkpoint, requeue, resume), overrides from
// RINGTRAIN_SET, the scripts' temporary files, a USR1 that comes before ringtrain can take it,
// and the printed advice that continues a stopped run. Slurm that cannot start FAILS these
// tests (CI installs it with tools/install-deps); the cluster is stopped in
// TearDownTestSuite, at exit and on fatal signals, and a stale one left by a killed run is
// stopped before the next run starts.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "integration/run_command.hpp"

namespace ringtrain::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const fs::path kSource = RINGTRAIN_SOURCE_DIR;
const fs::path kData = RINGTRAIN_DATA_DIR;
const fs::path kClusterScript = kSource / "tools/slurm/local-cluster";

// One cluster directory per build tree (not per run): a run killed before its clean-up
// leaves daemons whose pidfiles the next run finds and stops. Its name is short: the nodes'
// step sockets are made below it, and a unix socket's path holds at most 107 bytes.
fs::path cluster_dir() {
  char name[32];
  std::snprintf(name, sizeof(name), "slurm-%08x",
                static_cast<unsigned>(std::hash<std::string>{}(RINGTRAIN_BINARY_DIR)&0xffffffffU));
  return fs::temp_directory_path() / name;
}
fs::path work_dir() { return cluster_dir() / "work"; }

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Stopping from a signal handler: fork + exec only (async-signal-safe), paths prepared first.
char g_script[4096];
char g_dir[4096];
bool g_cluster_started = false;

void stop_cluster() {
  if (!g_cluster_started) return;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl(g_script, g_script, "stop", g_dir, static_cast<char*>(nullptr));
    ::_exit(127);
  }
  if (pid > 0) ::waitpid(pid, nullptr, 0);
  g_cluster_started = false;
}

extern "C" void stop_cluster_on_signal(int sig) {
  stop_cluster();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void write_executable(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
  fs::permissions(p, fs::perms::owner_all, fs::perm_options::add);
}

struct Job {
  int exit_code = -1;
  std::string id;
  std::string output;  // the job's output file (stdout and stderr of the batch script)
  std::string sbatch;  // what sbatch itself printed
  std::string all() const { return "--- sbatch:\n" + sbatch + "--- job output:\n" + output; }
};

class SlurmJobs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // A run inside a real allocation must not leak that job's settings into ours.
    std::vector<std::string> inherited;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      for (const char* prefix : {"SLURM_", "SBATCH_", "SALLOC_", "SRUN_"})
        if (kv.rfind(prefix, 0) == 0) inherited.push_back(kv.substr(0, kv.find('=')));
    }
    for (const auto& name : inherited) ::unsetenv(name.c_str());
    ::unsetenv("RINGTRAIN_ROOT");  // the scripts must find the checkout themselves

    const fs::path dir = cluster_dir();
    std::snprintf(g_script, sizeof(g_script), "%s", kClusterScript.c_str());
    std::snprintf(g_dir, sizeof(g_dir), "%s", dir.c_str());
    if (fs::exists(dir)) {
      g_cluster_started = true;  // whatever a killed earlier run left behind
      stop_cluster();
    }
    fs::remove_all(dir);
    fs::create_directories(work_dir());
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGABRT, SIGSEGV, SIGBUS}) ::signal(sig, stop_cluster_on_signal);
    std::atexit(stop_cluster);
    g_cluster_started = true;
    const auto r = run_command("timeout -k 5 60 " + shell_quote(g_script) + " start " + shell_quote(g_dir) + " 2");
    if (r.exit_code != 0) {
      start_error_ = "the local Slurm cluster did not start (tools/slurm/local-cluster start " + dir.string() +
                     " 2, exit " + std::to_string(r.exit_code) + "); install slurmctld slurmd slurm-client munge " +
                     "(tools/install-deps) and run as root:\n" + r.output;
      return;
    }
    ::setenv("SLURM_CONF", (dir / "slurm.conf").c_str(), 1);
    ::setenv("RINGTRAIN_EXE", RINGTRAIN_EXE, 1);
  }

  static void TearDownTestSuite() { stop_cluster(); }

  void SetUp() override {
    ASSERT_TRUE(start_error_.empty()) << start_error_;
    ASSERT_TRUE(fs::exists(kData / "train.h5")) << "fixture prepare_fashion_mnist did not run";
  }

  // sbatch --wait SCRIPT ARGS with the job's output in work/NAME.out; env: "VAR=value ...".
  static Job submit(const std::string& name, const std::string& options, const std::string& script,
                    const std::vector<std::string>& args, const std::string& env = "", int timeout_s = 120) {
    const fs::path out = work_dir() / (name + ".out");
    fs::remove(out);
    std::string cmd = "cd " + shell_quote(work_dir()) + " && env " + env + " timeout -k 5 " +
                      std::to_string(timeout_s) + " sbatch --wait " + options + " -o " + shell_quote(out) + " " +
                      shell_quote(kSource / "jobs" / script);
    for (const auto& a : args) cmd += " " + shell_quote(a);
    const auto r = run_command(cmd);
    Job job;
    job.exit_code = r.exit_code;
    job.sbatch = r.output;
    job.output = read_text(out);
    std::smatch m;
    if (std::regex_search(r.output, m, std::regex("Submitted batch job ([0-9]+)"))) job.id = m[1];
    return job;
  }

  // A short MLP run: 20 steps, no evaluation, one BLAS thread per rank (2 cores for 2 ranks).
  static std::vector<std::string> tiny_training(const fs::path& config, const std::string& run_dir) {
    std::vector<std::string> args = {config.string(),
                                     "train.max_steps=20",
                                     "train.log_every=10",
                                     "runtime.threads=1",
                                     "data.train=" + (kData / "train.h5").string(),
                                     "data.test="};
    if (!run_dir.empty()) args.push_back("run.dir=" + run_dir);
    return args;
  }

  static nlohmann::json summary_at(const fs::path& run_dir) {
    std::ifstream f(run_dir / "summary.json");
    return f.good() ? nlohmann::json::parse(f) : nlohmann::json();
  }

  static inline std::string start_error_;
};

const fs::path kMlp = kSource / "examples/fashion_mnist/mlp.toml";

TEST_F(SlurmJobs, ScriptsOutsideSlurmFailAtOnceWithOneLine) {
  for (const char* script :
       {"train.sbatch", "train_mpirun.sbatch", "preemptible.sbatch", "scaling.sbatch", "bench_allreduce.sbatch"}) {
    const auto start = Clock::now();
    const auto r =
        run_command("env -u SLURM_JOB_ID " + shell_quote(kSource / "jobs" / script) + " " + shell_quote(kMlp.string()));
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_EQ(r.exit_code, 1) << script << ": " << r.output;
    EXPECT_EQ(lines_of(r.output).size(), 1u) << script << ": " << r.output;
    EXPECT_NE(r.output.find(std::string(script) + ": error: not inside a Slurm job"), std::string::npos) << r.output;
    EXPECT_LT(seconds, 5.0) << script;
  }
}

// One node, two tasks, a config without run.dir (as the examples are): the run directory is
// named after the job.
TEST_F(SlurmJobs, TrainOnOneNodeNamesTheRunAfterTheJob) {
  const std::string config = read_text(kMlp);
  ASSERT_FALSE(std::regex_search(config, std::regex("\n\\[run\\]\n"))) << "examples/fashion_mnist/mlp.toml sets [run]";
  // A copy under its own name: the run directory, runs/mlp-nodir-<job id>, is this test's own.
  const fs::path config_path = work_dir() / "mlp-nodir.toml";
  std::ofstream(config_path) << config;

  const Job job = submit("one-node", "-N 1 --ntasks-per-node=2", "train.sbatch", tiny_training(config_path, ""));
  ASSERT_EQ(job.exit_code, 0) << job.all();
  ASSERT_FALSE(job.id.empty()) << job.all();
  EXPECT_NE(job.output.find("train.sbatch: job " + job.id), std::string::npos) << job.all();
  EXPECT_NE(job.output.find("train.sbatch: config: " + config_path.string()), std::string::npos) << job.all();
  EXPECT_NE(job.output.find("train.sbatch: exe: " RINGTRAIN_EXE), std::string::npos) << job.all();
  EXPECT_NE(job.output.find("2 ranks on 1 node (node1)"), std::string::npos) << job.all();
  EXPECT_NE(job.output.find("slurm:  job " + job.id + " (1 node, 2 tasks, nodes node1)"), std::string::npos)
      << job.all();
  const fs::path run_dir = work_dir() / "runs" / ("mlp-nodir-" + job.id);
  const auto summary = summary_at(run_dir);
  ASSERT_FALSE(summary.is_null()) << "no summary.json in " << run_dir << "\n" << job.all();
  EXPECT_EQ(summary["world_size"], 2);
  EXPECT_EQ(summary["steps"], 20);
  EXPECT_NE(job.output.find("train.sbatch: finished: runs/mlp-nodir-" + job.id + "/summary.json"), std::string::npos)
      << job.all();
}

TEST_F(SlurmJobs, TrainOnTwoNodesRunsARankOnEach) {
  const fs::path run_dir = work_dir() / "two-nodes";
  const Job job = submit("two-nodes", "-N 2 --ntasks-per-node=1", "train.sbatch", tiny_training(kMlp, run_dir));
  ASSERT_EQ(job.exit_code, 0) << job.all();
  EXPECT_NE(job.output.find("2 ranks on 2 nodes (node1, node2)"), std::string::npos) << job.all();
  EXPECT_NE(job.output.find("slurm:  job " + job.id + " (2 nodes, 2 tasks, nodes node[1-2])"), std::string::npos)
      << job.all();
  const auto summary = summary_at(run_dir);
  ASSERT_FALSE(summary.is_null()) << job.all();
  EXPECT_EQ(summary["world_size"], 2);
  EXPECT_EQ(summary["nodes"], 2);
  EXPECT_EQ(summary["param_checksum"].get<std::string>().size(), 16u);
}

TEST_F(SlurmJobs, TrainThroughMpirunInsideTheAllocation) {
  const fs::path run_dir = work_dir() / "mpirun";
  const Job job = submit("mpirun", "-N 1 --ntasks-per-node=2", "train_mpirun.sbatch", tiny_training(kMlp, run_dir));
  ASSERT_EQ(job.exit_code, 0) << job.all();
  EXPECT_NE(job.output.find("train_mpirun.sbatch: launch: mpirun"), std::string::npos) << job.all();
  EXPECT_NE(job.output.find("2 ranks on 1 node (node1)"), std::string::npos) << job.all();
  const auto summary = summary_at(run_dir);
  ASSERT_FALSE(summary.is_null()) << job.all();
  EXPECT_EQ(summary["world_size"], 2);
}

TEST_F(SlurmJobs, MissingConfigFailsTheJobWithAClearMessage) {
  const std::string missing = (work_dir() / "no-such-config.toml").string();
  const Job job = submit("missing-config", "", "train.sbatch", {missing, "train.max_steps=20"});
  EXPECT_NE(job.exit_code, 0) << job.all();
  EXPECT_NE(job.output.find("train.sbatch: error: config file not found: " + missing), std::string::npos) << job.all();
  EXPECT_EQ(job.output.find("launch:"), std::string::npos) << "nothing may be launched\n" << job.all();
}

TEST_F(SlurmJobs, FailingRingtrainFailsTheJob) {
  auto args = tiny_training(kMlp, (work_dir() / "bad-key").string());
  args.push_back("train.no_such_key=1");
  const Job job = submit("bad-key", "", "train.sbatch", args);
  EXPECT_NE(job.exit_code, 0) << job.all();
  EXPECT_NE(job.output.find("ringtrain: error:"), std::string::npos) << job.all();
  EXPECT_NE(job.output.find("train.sbatch: error: the launch failed"), std::string::npos) << job.all();
}

// A fake ringtrain whose rank 0 dies of SIGSEGV before ringtrain runs (as a rank did inside
// Open MPI's MPI_Init, docs/RELIABILITY.md) on its first `crashes` starts, then runs ringtrain.
fs::path crashing_ringtrain(const std::string& name, int crashes) {
  const std::string starts = shell_quote((work_dir() / (name + ".starts")).string());
  fs::remove(work_dir() / (name + ".starts"));
  const fs::path fake = work_dir() / (name + ".sh");
  write_executable(fake,
                   "#!/bin/sh\n"
                   "if [ \"$SLURM_PROCID\" = 0 ]; then\n"
                   "  echo start >>" +
                       starts +
                       "\n"
                       "  [ \"$(wc -l <" +
                       starts + ")\" -le " + std::to_string(crashes) +
                       " ] && kill -SEGV $$\n"
                       "fi\n"
                       "exec " +
                       shell_quote(RINGTRAIN_EXE) + " \"$@\"\n");
  return fake;
}

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Nothing was computed or written when a rank died starting (and srun ended the other): the job
// launches once more, and the training finishes.
TEST_F(SlurmJobs, ALaunchThatDiesStartingIsLaunchedOnceMore) {
  const fs::path run_dir = work_dir() / "crash-once";
  fs::remove_all(run_dir);
  const Job job =
      submit("crash-once", "-N 2 --ntasks-per-node=1", "train.sbatch", tiny_training(kMlp, run_dir.string()),
             "RINGTRAIN_EXE=" + shell_quote(crashing_ringtrain("crash-once", 1)));
  ASSERT_EQ(job.exit_code, 0) << job.all();
  EXPECT_EQ(count_of(job.output, "train.sbatch: launch: srun"), 2u) << job.all();
  EXPECT_NE(job.output.find("train.sbatch: the launch died of a signal (exit status "), std::string::npos) << job.all();
  EXPECT_NE(job.output.find("before ringtrain's first line: nothing was computed or written yet; launching once more"),
            std::string::npos)
      << job.all();
  EXPECT_EQ(summary_at(run_dir)["steps"], 20) << job.all();
}

// ... but only once: a launch that dies starting again fails the job.
TEST_F(SlurmJobs, ALaunchThatDiesStartingTwiceFailsTheJob) {
  const Job job = submit("crash-twice", "", "train.sbatch", tiny_training(kMlp, (work_dir() / "crash-twice").string()),
                         "RINGTRAIN_EXE=" + shell_quote(crashing_ringtrain("crash-twice", 2)));
  EXPECT_NE(job.exit_code, 0) << job.all();
  EXPECT_EQ(count_of(job.output, "train.sbatch: launch: srun"), 2u) << job.all();
  EXPECT_NE(job.output.find("train.sbatch: the launch died of a signal before ringtrain's first line again: giving up"),
            std::string::npos)
      << job.all();
  EXPECT_NE(job.output.find("train.sbatch: error: the launch failed (exit status "), std::string::npos) << job.all();
}

// A launch that exits 0 without ringtrain's final line (what a failed srun step can look
// like) must not pass for a finished training.
TEST_F(SlurmJobs, LaunchExitingZeroWithoutFinishingFailsTheJob) {
  const Job job = submit("no-done", "", "train.sbatch", tiny_training(kMlp, ""), "RINGTRAIN_EXE=/bin/true");
  EXPECT_NE(job.exit_code, 0) << job.all();
  EXPECT_NE(job.output.find("ringtrain did not finish (no 'done:' line"), std::string::npos) << job.all();
}

TEST_F(SlurmJobs, ScalingPrintsSamplesPerSecond) {
  const fs::path run_dir = work_dir() / "scaling";
  auto args = tiny_training(kMlp, run_dir);
  std::erase(args, "train.max_steps=20");  // an override would win over MAX_STEPS
  args.insert(args.begin() + 1, "30");     // MAX_STEPS
  const fs::path results = work_dir() / "scaling.jsonl";
  fs::remove(results);
  const Job job = submit("scaling", "-N 2 --ntasks-per-node=1", "scaling.sbatch", args,
                         "RINGTRAIN_SCALING_OUT=" + shell_quote(results));
  ASSERT_EQ(job.exit_code, 0) << job.all();
  const auto lines = lines_of(read_text(results));
  ASSERT_FALSE(lines.empty()) << job.all();
  const auto j = nlohmann::json::parse(lines.front());
  EXPECT_EQ(j["job"], job.id);
  EXPECT_EQ(j["mode"], "weak");
  EXPECT_EQ(j["bench"], "train");
  EXPECT_EQ(j["nodes"], 2);
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["timed_steps"], 30);
  EXPECT_GT(j["samples_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["backward_ms"].get<double>(), 0.0);
  EXPECT_NE(job.output.find("scaling: {"), std::string::npos) << job.all();
}

TEST_F(SlurmJobs, BenchAllreduceOnTwoNodes) {
  const Job job = submit("bench", "-N 2 --ntasks-per-node=1", "bench_allreduce.sbatch",
                         {"--max-bytes", "65536", "--iters", "3", "--backends", "ring,mpi"});
  ASSERT_EQ(job.exit_code, 0) << job.all();
  EXPECT_NE(job.output.find("busbw"), std::string::npos) << job.all();
  EXPECT_NE(job.output.find("2 ranks"), std::string::npos) << job.all();
}

// A preemptible job is sent USR1 while it trains; it must checkpoint, requeue itself
// (Restarts=1), resume from the checkpoint's step, and end with exactly the parameters of an
// uninterrupted run.
TEST_F(SlurmJobs, PreemptedJobRequeuesAndResumesToTheSameParameters) {
  constexpr int kSteps = 800;  // crosses an epoch (468 steps at global batch 128)
  auto args_for = [&](const fs::path& run_dir) {
    return std::vector<std::string>{kMlp.string(),
                                    "train.max_steps=" + std::to_string(kSteps),
                                    "train.log_every=10",
                                    "runtime.threads=1",
                                    "data.train=" + (kData / "train.h5").string(),
                                    "data.test=",
                                    "run.dir=" + run_dir.string()};
  };
  const fs::path reference_dir = work_dir() / "preempt-reference";
  const Job reference =
      submit("preempt-reference", "-N 2 --ntasks-per-node=1", "train.sbatch", args_for(reference_dir));
  ASSERT_EQ(reference.exit_code, 0) << reference.all();
  const auto expected = summary_at(reference_dir);
  ASSERT_FALSE(expected.is_null()) << reference.all();

  const fs::path run_dir = work_dir() / "preempted";
  auto pending = std::async(std::launch::async, [&] {
    return submit("preempted", "-N 2 --ntasks-per-node=1", "preemptible.sbatch", args_for(run_dir), "", 180);
  });
  // The job id, from the job's own first line; then wait for training to be under way.
  const fs::path out = work_dir() / "preempted.out";
  std::string id;
  std::smatch m;
  const auto start = Clock::now();
  while (Clock::now() - start < std::chrono::seconds(60)) {
    const std::string text = read_text(out);
    if (id.empty() && std::regex_search(text, m, std::regex("preemptible.sbatch: job ([0-9]+)"))) id = m[1];
    if (!id.empty() && lines_of(read_text(run_dir / "metrics.jsonl")).size() >= 5) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(id.empty()) << read_text(out);
  ASSERT_GE(lines_of(read_text(run_dir / "metrics.jsonl")).size(), 5u) << "training never got going\n"
                                                                       << read_text(out);
  const auto signalled = run_command("scancel --signal=USR1 --batch " + id);
  ASSERT_EQ(signalled.exit_code, 0) << signalled.output;

  // While the requeued job runs again, Slurm's record shows the restart.
  std::string record;
  const auto requeue_start = Clock::now();
  while (Clock::now() - requeue_start < std::chrono::seconds(90)) {
    if (read_text(out).find("| restart 1 |") != std::string::npos) {
      record = run_command("scontrol show job " + id).output;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const Job job = pending.get();
  ASSERT_EQ(job.exit_code, 0) << job.all();
  EXPECT_NE(record.find("Restarts=1"), std::string::npos) << record << job.all();
  EXPECT_NE(job.output.find("preemptible.sbatch: requeued job " + id), std::string::npos) << job.all();

  // The checkpoint written on the signal is the one the second run resumed from.
  std::smatch written, resumed;
  ASSERT_TRUE(std::regex_search(job.output, written, std::regex("checkpoint: (\\S+) .*at step ([0-9]+)"))) << job.all();
  ASSERT_TRUE(std::regex_search(job.output, resumed, std::regex("resume: (\\S+) at step ([0-9]+)"))) << job.all();
  EXPECT_EQ(written[1], resumed[1]) << job.all();
  EXPECT_EQ(written[2], resumed[2]) << job.all();
  EXPECT_TRUE(fs::exists(std::string(written[1]))) << written[1];
  const int stopped_at = std::stoi(written[2]);
  EXPECT_GT(stopped_at, 0);
  EXPECT_LT(stopped_at, kSteps) << "the signal came after the end of training";

  const auto summary = summary_at(run_dir);
  ASSERT_FALSE(summary.is_null()) << job.all();
  EXPECT_EQ(summary["param_checksum"], expected["param_checksum"]) << "resumed run differs from the uninterrupted one";
}

// RINGTRAIN_SET is split like shell words and nothing in it is expanded: a value with a space,
// '*' and '?', and one whose '*' would match a file in the job's directory, reach ringtrain as
// written (its resolved config.toml holds them); a quote left open is one error line.
TEST_F(SlurmJobs, RingtrainSetKeepsSpacesAndGlobCharacters) {
  const fs::path run_dir = work_dir() / "set dir" / "a*b?";
  fs::remove_all(work_dir() / "set dir");
  fs::remove_all(work_dir() / "glob-*");
  std::ofstream(work_dir() / "checkpoint.dir=glob-decoy");  // what checkpoint.dir=glob-* would glob to
  const std::string set = "run.dir='" + run_dir.string() + "' checkpoint.dir=glob-*";
  const Job job =
      submit("ringtrain-set", "", "train.sbatch", tiny_training(kMlp, ""), "RINGTRAIN_SET=" + shell_quote(set));
  ASSERT_EQ(job.exit_code, 0) << job.all();
  const std::string config = read_text(run_dir / "config.toml");
  EXPECT_NE(config.find("dir = '" + run_dir.string() + "'"), std::string::npos) << config << job.all();
  EXPECT_NE(config.find("dir = 'glob-*'"), std::string::npos) << config << job.all();
  EXPECT_TRUE(fs::exists(work_dir() / "glob-*" / "latest")) << job.all();

  const Job open_quote =
      submit("ringtrain-set-open", "", "train.sbatch", tiny_training(kMlp, ""), "RINGTRAIN_SET=\"run.dir='x\"");
  EXPECT_NE(open_quote.exit_code, 0) << open_quote.all();
  EXPECT_NE(open_quote.output.find("train.sbatch: error: RINGTRAIN_SET cannot be split into words (unmatched single "
                                   "quote): quote a value with blanks as key='a b'"),
            std::string::npos)
      << open_quote.all();
  EXPECT_EQ(open_quote.output.find("launch:"), std::string::npos) << open_quote.all();
}

// The launch's log and the pipe to tee are in a private directory of their own (mode 0700,
// made by mktemp -d), not at names next to each other in the shared TMPDIR; it is gone when
// the job ends, here with an error (the fake ringtrain lists TMPDIR and prints nothing).
TEST_F(SlurmJobs, TemporaryFilesArePrivateAndRemovedOnError) {
  const fs::path tmp = work_dir() / "job-tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const fs::path listing = work_dir() / "job-tmp.txt";
  fs::remove(listing);
  const fs::path fake = work_dir() / "list-tmpdir.sh";
  write_executable(fake,
                   "#!/bin/sh\n# What the job keeps in TMPDIR while it runs.\nfind \"$TMPDIR\" -mindepth 1 "
                   "-printf '%P %M\\n' | sort >" +
                       shell_quote(listing.string()) + "\n");
  const Job job = submit("tmp-files", "", "train.sbatch", tiny_training(kMlp, ""),
                         "TMPDIR=" + shell_quote(tmp) + " RINGTRAIN_EXE=" + shell_quote(fake));
  EXPECT_NE(job.exit_code, 0) << job.all();
  EXPECT_NE(job.output.find("ringtrain did not finish"), std::string::npos) << job.all();
  // Sorted by path: the directory, then its files (TMPDIR also holds srun's PMIx directory, and
  // once, in a CI-like run, held a directory of the earlier preempted job: only this job's count).
  ASSERT_FALSE(job.id.empty()) << job.all();
  const std::string mine = "ringtrain-job-" + job.id + ".";
  std::vector<std::string> lines;
  for (const auto& line : lines_of(read_text(listing)))
    if (line.rfind(mine, 0) == 0) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u) << read_text(listing) << job.all();
  const std::string dir = lines[0].substr(0, lines[0].find(' '));
  EXPECT_EQ(lines[0], dir + " drwx------") << read_text(listing);
  EXPECT_EQ(lines[1].rfind(dir + "/output.fifo p", 0), 0u) << read_text(listing);
  EXPECT_EQ(lines[2].rfind(dir + "/output.log -", 0), 0u) << read_text(listing);
  for (const auto& entry : fs::directory_iterator(tmp))
    EXPECT_NE(entry.path().filename().string().rfind(mine, 0), 0u) << entry.path() << " left after the job";
}

// A USR1 that reaches the job before ringtrain can take it (here: sent while the launched
// task has not started ringtrain yet; srun would kill the task with it, or drop it before
// the task exists) is held and passed on once ringtrain runs: it stops after its first step
// with a checkpoint.
TEST_F(SlurmJobs, UsrOneBeforeRingtrainRunsIsPassedOnWhenItDoes) {
  const fs::path fake = work_dir() / "usr1-first.sh";
  write_executable(fake,
                   "#!/bin/sh\n# Signals the batch shell before ringtrain starts, then runs it.\n"
                   "scancel --signal=USR1 --batch \"$SLURM_JOB_ID\" || exit 1\nsleep 2\nexec " +
                       shell_quote(RINGTRAIN_EXE) + " \"$@\"\n");
  const Job job = submit("usr1-first", "", "train.sbatch", tiny_training(kMlp, (work_dir() / "usr1-first").string()),
                         "RINGTRAIN_EXE=" + shell_quote(fake));
  EXPECT_NE(job.exit_code, 0) << job.all();
  EXPECT_NE(job.output.find("train.sbatch: SIGUSR1: asking ringtrain to checkpoint and stop"), std::string::npos)
      << job.all();
  EXPECT_NE(job.output.find("stopped: SIGUSR1 received"), std::string::npos) << job.all();
  EXPECT_NE(job.output.find("train.sbatch: error: ringtrain stopped early after writing a checkpoint (exit 75)"),
            std::string::npos)
      << job.all();
}

// A run stopped with a checkpoint (train.exit_at_step) under the default run.dir, which is
// named after the job: the command the job prints to continue it, pasted into a shell as it
// is, resumes that run in that directory (not a new one named after the new job) from the
// checkpoint's step and finishes it. An override with a space must survive the pasting.
TEST_F(SlurmJobs, PrintedAdviceContinuesTheSameRun) {
  const fs::path config_path = work_dir() / "mlp-continue.toml";
  std::ofstream(config_path) << read_text(kMlp);
  const fs::path checkpoints = work_dir() / "continue checkpoints";
  fs::remove_all(checkpoints);
  auto args = tiny_training(config_path, "");
  args.push_back("train.exit_at_step=10");
  args.push_back("checkpoint.dir=" + checkpoints.string());
  const Job first = submit("continue-first", "-N 2 --ntasks-per-node=1", "train.sbatch", args);
  EXPECT_NE(first.exit_code, 0) << first.all();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      first.output, m, std::regex("train\\.sbatch: error: [^\n]*\\(exit 75\\); continue with: (sbatch [^\n]*)")))
      << first.all();
  const std::string advice = m[1];
  const fs::path run_dir = work_dir() / "runs" / ("mlp-continue-" + first.id);
  EXPECT_NE(advice.find("run.dir=" + run_dir.string()), std::string::npos) << advice;
  EXPECT_NE(advice.find(" train.resume=auto"), std::string::npos) << advice;

  // As a user would paste it, with sbatch made to wait and to write its output here.
  const fs::path out = work_dir() / "continue-second.out";
  fs::remove(out);
  const auto r =
      run_command("cd " + shell_quote(work_dir()) + " && timeout -k 5 120 bash -c " +
                  shell_quote("sbatch() { command sbatch --wait -o " + shell_quote(out) + " \"$@\"; }\n" + advice));
  const std::string second = read_text(out);
  ASSERT_EQ(r.exit_code, 0) << advice << "\n" << r.output << second;
  std::smatch resumed;
  ASSERT_TRUE(std::regex_search(second, resumed, std::regex("resume: (\\S+[^\n]*) at step ([0-9]+)"))) << second;
  EXPECT_EQ(resumed[2], "10") << second;
  EXPECT_EQ(fs::path(std::string(resumed[1])).parent_path(), checkpoints) << second;
  EXPECT_NE(second.find("2 ranks on 2 nodes"), std::string::npos) << second;
  const auto summary = summary_at(run_dir);
  ASSERT_FALSE(summary.is_null()) << "no summary.json in " << run_dir << "\n" << second;
  EXPECT_EQ(summary["finished"], true);
  EXPECT_EQ(summary["final_step"], 20);
  EXPECT_NE(second.find("train.sbatch: finished: " + run_dir.string() + "/summary.json"), std::string::npos) << second;
}

}  // namespace
}  // namespace ringtrain::test
