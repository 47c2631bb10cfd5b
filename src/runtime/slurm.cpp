// Slurm context from the environment (see header). Malformed numbers read as unknown: the
// values only name directories and fill the start-up header, nothing depends on them.
#include "ringtrain/runtime/slurm.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <unordered_set>

#include "check/mpi_check.hpp"
#include "runtime/mpi_context.hpp"

namespace ringtrain {
namespace {

std::string text_of(const EnvLookup& getenv, const char* name) {
  const char* v = getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

int int_of(const EnvLookup& getenv, const char* name, int unknown) {
  const std::string s = text_of(getenv, name);
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size() && v >= 0 ? v : unknown;
}

std::string count_of(int n, const char* what) { return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s"); }

}  // namespace

std::string SlurmInfo::run_id() const {
  if (!array_job_id.empty() && !array_task_id.empty()) return array_job_id + "_" + array_task_id;
  return job_id;
}

std::string SlurmInfo::describe() const {
  if (!active()) return {};
  std::vector<std::string> parts;
  if (run_id() != job_id) parts.push_back("array task " + run_id());
  if (num_nodes > 0) parts.push_back(count_of(num_nodes, "node"));
  if (ntasks > 0) parts.push_back(count_of(ntasks, "task"));
  if (!nodelist.empty()) parts.push_back("nodes " + nodelist);
  std::string out = "job " + job_id;
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i == 0 ? " (" : ", ") + parts[i];
  return parts.empty() ? out : out + ")";
}

SlurmInfo slurm_info_from(const EnvLookup& getenv) {
  SlurmInfo s;
  s.job_id = text_of(getenv, "SLURM_JOB_ID");
  s.array_job_id = text_of(getenv, "SLURM_ARRAY_JOB_ID");
  s.array_task_id = text_of(getenv, "SLURM_ARRAY_TASK_ID");
  s.num_nodes = int_of(getenv, "SLURM_JOB_NUM_NODES", 0);
  s.ntasks = int_of(getenv, "SLURM_NTASKS", 0);
  s.procid = int_of(getenv, "SLURM_PROCID", -1);
  s.localid = int_of(getenv, "SLURM_LOCALID", -1);
  s.nodelist = text_of(getenv, "SLURM_JOB_NODELIST");
  s.step_gpus = text_of(getenv, "SLURM_STEP_GPUS");
  s.cuda_visible_devices = text_of(getenv, "CUDA_VISIBLE_DEVICES");
  s.nodename = text_of(getenv, "SLURMD_NODENAME");
  return s;
}

SlurmInfo slurm_info() {
  return slurm_info_from([](const char* name) -> const char* { return std::getenv(name); });
}

std::string node_name() {
  if (const char* n = std::getenv("SLURMD_NODENAME"); n != nullptr && *n != '\0') return n;
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "unknown-host";
  return host;
}

std::vector<std::string> gather_node_names(const Context& ctx) {
  constexpr int kLen = 256;  // longer names are cut (they only label the header)
  std::string mine = node_name().substr(0, kLen - 1);
  mine.resize(kLen, '\0');
  const int size = ctx.world_size();
  std::vector<char> all(ctx.world_rank() == 0 ? static_cast<std::size_t>(size) * kLen : 0);
  RT_MPI_CHECK(MPI_Gather(mine.data(), kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, 0, world_comm(ctx)));
  if (ctx.world_rank() != 0) return {mine.c_str()};
  std::vector<std::string> names;
  std::unordered_set<std::string> seen;
  for (int r = 0; r < size; ++r) {
    std::string n(all.data() + static_cast<std::size_t>(r) * kLen);
    if (seen.insert(n).second) names.push_back(std::move(n));
  }
  return names;
}

std::string join_node_names(const std::vector<std::string>& names, std::size_t max_shown) {
  std::string out;
  const std::size_t shown = std::min(names.size(), max_shown);
  for (std::size_t i = 0; i < shown; ++i) out += (i == 0 ? "" : ", ") + names[i];
  if (shown < names.size()) out += fmt::format(", ... ({} nodes)", names.size());
  return out;
}

}  // namespace ringtrain
