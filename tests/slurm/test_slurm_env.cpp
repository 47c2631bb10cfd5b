// runtime/slurm: the job context read from Slurm's variables (plain, array job, outside
// Slurm, malformed values), the header line, and the node-name gather over MPI (each rank
// pretends to be on node1 or node2 through SLURMD_NODENAME, as slurmd sets it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>

#include "ringtrain/runtime/slurm.hpp"
#include "support/test_context.hpp"

namespace ringtrain {
namespace {

// Sets SLURMD_NODENAME for one scope and restores what was there.
class NodenameEnv {
 public:
  explicit NodenameEnv(const char* value) {
    if (const char* v = std::getenv("SLURMD_NODENAME")) saved_ = v;
    value ? ::setenv("SLURMD_NODENAME", value, 1) : ::unsetenv("SLURMD_NODENAME");
  }
  ~NodenameEnv() { saved_ ? ::setenv("SLURMD_NODENAME", saved_->c_str(), 1) : ::unsetenv("SLURMD_NODENAME"); }

 private:
  std::optional<std::string> saved_;
};

EnvLookup env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(Slurm, OutsideSlurmNothingIsActive) {
  const SlurmInfo s = slurm_info_from(env_of({{"CUDA_VISIBLE_DEVICES", "0"}}));
  EXPECT_FALSE(s.active());
  EXPECT_EQ(s.describe(), "");
  EXPECT_EQ(s.cuda_visible_devices, "0");
}

TEST(Slurm, ReadsAJobStep) {
  const SlurmInfo s = slurm_info_from(env_of({{"SLURM_JOB_ID", "123"},
                                              {"SLURM_JOB_NUM_NODES", "2"},
                                              {"SLURM_NTASKS", "4"},
                                              {"SLURM_PROCID", "3"},
                                              {"SLURM_LOCALID", "1"},
                                              {"SLURM_JOB_NODELIST", "node[1-2]"},
                                              {"SLURM_STEP_GPUS", "2,3"},
                                              {"SLURMD_NODENAME", "node2"}}));
  ASSERT_TRUE(s.active());
  EXPECT_EQ(s.run_id(), "123");
  EXPECT_EQ(s.num_nodes, 2);
  EXPECT_EQ(s.ntasks, 4);
  EXPECT_EQ(s.procid, 3);
  EXPECT_EQ(s.localid, 1);
  EXPECT_EQ(s.step_gpus, "2,3");
  EXPECT_EQ(s.nodename, "node2");
  EXPECT_EQ(s.describe(), "job 123 (2 nodes, 4 tasks, nodes node[1-2])");
}

TEST(Slurm, ArrayTasksNameTheirRunsByArrayAndTask) {
  const SlurmInfo s = slurm_info_from(env_of({{"SLURM_JOB_ID", "52"},
                                              {"SLURM_ARRAY_JOB_ID", "45"},
                                              {"SLURM_ARRAY_TASK_ID", "7"},
                                              {"SLURM_JOB_NUM_NODES", "1"},
                                              {"SLURM_NTASKS", "1"},
                                              {"SLURM_JOB_NODELIST", "node1"}}));
  EXPECT_EQ(s.run_id(), "45_7");
  EXPECT_EQ(s.describe(), "job 52 (array task 45_7, 1 node, 1 task, nodes node1)");
}

TEST(Slurm, MalformedNumbersReadAsUnknown) {
  const SlurmInfo s = slurm_info_from(
      env_of({{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_NUM_NODES", "2x"}, {"SLURM_NTASKS", ""}, {"SLURM_PROCID", "-1"}}));
  EXPECT_EQ(s.num_nodes, 0);
  EXPECT_EQ(s.ntasks, 0);
  EXPECT_EQ(s.procid, -1);
  EXPECT_EQ(s.describe(), "job 9");
}

TEST(Slurm, JoinsNodeNamesAndShortensLongLists) {
  EXPECT_EQ(join_node_names({"node1"}), "node1");
  EXPECT_EQ(join_node_names({"node1", "node2"}), "node1, node2");
  EXPECT_EQ(join_node_names({"a", "b", "c", "d"}, 2), "a, b, ... (4 nodes)");
}

TEST(Slurm, NodeNamePrefersSlurmdNodename) {
  {
    NodenameEnv unset(nullptr);
    EXPECT_FALSE(node_name().empty());  // the host name
  }
  NodenameEnv set("node7");
  EXPECT_EQ(node_name(), "node7");
}

TEST(Slurm, GathersDistinctNodeNamesInRankOrderOnRankZero) {
  Context& ctx = test::context();
  // Ranks 0, 2, ... on node2 and 1, 3, ... on node1: the order follows the first rank on each.
  NodenameEnv env(ctx.world_rank() % 2 == 0 ? "node2" : "node1");
  const auto names = gather_node_names(ctx);
  if (ctx.world_rank() != 0) {
    EXPECT_EQ(names, std::vector<std::string>{ctx.world_rank() % 2 == 0 ? "node2" : "node1"});
  } else if (ctx.world_size() == 1) {
    EXPECT_EQ(names, std::vector<std::string>{"node2"});
  } else {
    EXPECT_EQ(names, (std::vector<std::string>{"node2", "node1"}));
  }
}

}  // namespace
}  // namespace ringtrain
