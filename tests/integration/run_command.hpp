// Runs the real ringtrain executable under mpirun (with a hard timeout, so a hang fails the
// test instead of blocking CI) and returns its exit status and combined output.
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace ringtrain::test {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

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

// `timeout 120 mpirun -np N ... ringtrain ARGS...`
inline CommandResult run_ringtrain(int ranks, const std::vector<std::string>& args, int timeout_s = 120) {
  // odls_base_sigkill_timeout=0: mpirun ends a failed job at once instead of waiting ~2 s.
  std::string cmd = "OMPI_MCA_odls_base_sigkill_timeout=0 timeout -k 5 " + std::to_string(timeout_s) + " " +
                    shell_quote(RINGTRAIN_MPIEXEC) + " -np " +
                    std::to_string(ranks) +
                    " --oversubscribe --allow-run-as-root --bind-to none --mca btl self,vader"
                    " --mca btl_vader_single_copy_mechanism none " +
                    shell_quote(RINGTRAIN_EXE);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  return run_command(cmd);
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

}  // namespace ringtrain::test
