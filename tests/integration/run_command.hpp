// Runs the real ringtrain executable under mpirun (with a hard timeout, so a hang fails the
// test instead of blocking CI) and returns its exit status and combined output.
#pragma once
#include <sys/types.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace ringtrain::test {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// An empty directory of that name under the temporary directory (removed first if it exists).
inline std::filesystem::path fresh_temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe) != nullptr) r.output += buf.data();
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// The shell command `timeout 120 mpirun -np N ... ringtrain ARGS...`
inline std::string ringtrain_command(int ranks, const std::vector<std::string>& args, int timeout_s = 120) {
  // odls_base_sigkill_timeout=0: mpirun ends a failed job at once instead of waiting ~2 s.
  std::string cmd = "OMPI_MCA_odls_base_sigkill_timeout=0 timeout -k 5 " + std::to_string(timeout_s) + " " +
                    shell_quote(RINGTRAIN_MPIEXEC) + " -np " + std::to_string(ranks) +
                    " --oversubscribe --allow-run-as-root --bind-to none --mca btl self,vader"
                    " --mca btl_vader_single_copy_mechanism none " +
                    shell_quote(RINGTRAIN_EXE);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  return cmd;
}

inline CommandResult run_ringtrain(int ranks, const std::vector<std::string>& args, int timeout_s = 120) {
  return run_command(ringtrain_command(ranks, args, timeout_s));
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = text.find('\n', start);
    out.push_back(text.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// The lines of a command's output that are ringtrain's error lines ("ringtrain: error: ...").
inline std::vector<std::string> error_lines(const std::string& output) {
  std::vector<std::string> out;
  for (const auto& line : lines_of(output))
    if (line.rfind("ringtrain: error:", 0) == 0) out.push_back(line);
  return out;
}

// PIDs of the ringtrain processes of this run (their command line names the run dir),
// keyed by MPI rank (from OMPI_COMM_WORLD_RANK in their environment).
inline std::map<int, pid_t> rank_pids(const std::string& run_dir) {
  std::map<int, pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream comm(entry.path() / "comm");
    std::string exe;
    std::getline(comm, exe);
    if (exe != "ringtrain") continue;
    std::ifstream cmd(entry.path() / "cmdline");
    const std::string cmdline((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
    if (cmdline.find(run_dir) == std::string::npos) continue;
    std::ifstream env(entry.path() / "environ");
    const std::string environ((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    const auto at = environ.find("OMPI_COMM_WORLD_RANK=");
    if (at == std::string::npos) continue;
    out[std::stoi(environ.substr(at + 21))] = static_cast<pid_t>(std::stoi(name));
  }
  return out;
}

inline std::size_t lines_in(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::size_t n = 0;
  for (std::string line; std::getline(f, line);) ++n;
  return n;
}

}  // namespace ringtrain::test
