// Context binding: CPU thread split, rejected values, and CUDA binding (a clear error
// without a GPU or without CUDA in the build; local rank mod GPUs with one).
#include <gtest/gtest.h>

#include "ringtrain/core/error.hpp"
#include "runtime/cpu_share.hpp"
#include "support/test_context.hpp"

namespace ringtrain {
namespace {

TEST(Runtime, CpuBindingGivesAtLeastOneThread) {
  Context& ctx = test::context();
  ctx.bind(Device::cpu, 0);
  EXPECT_EQ(ctx.binding().backend, Device::cpu);
  EXPECT_GE(ctx.binding().threads, 1);
  ctx.bind(Device::cpu, 3);
  EXPECT_EQ(ctx.binding().threads, 3);
  ctx.bind(Device::cpu, 1);
}

TEST(CpuShare, AutomaticThreadsSplitTheNodeWithinTheAffinityMask) {
  EXPECT_EQ(automatic_threads({.hardware = 16, .affinity = 16, .local_ranks = 4}), 4);
  EXPECT_EQ(automatic_threads({.hardware = 16, .affinity = 1, .local_ranks = 4}), 1);
  EXPECT_EQ(automatic_threads({.hardware = 16, .affinity = 0, .local_ranks = 4}), 4);  // mask unknown
  EXPECT_EQ(automatic_threads({.hardware = 2, .affinity = 2, .local_ranks = 4}), 1);   // never 0
}

TEST(CpuShare, NamesThreadsThatTheRanksCpusCannotRunAtOnce) {
  // mpirun's default for one or two ranks: each bound to one core.
  const std::string bound = oversubscription({.hardware = 2, .affinity = 1, .local_ranks = 1}, 2);
  EXPECT_NE(bound.find("runtime.threads (or --threads) = 2 but this rank is bound to 1 CPU"), std::string::npos)
      << bound;
  EXPECT_NE(bound.find("--bind-to none"), std::string::npos) << bound;
  EXPECT_NE(bound.find("--cpus-per-task=2"), std::string::npos) << bound;
  // Unbound ranks whose threads together exceed the node.
  const std::string crowded = oversubscription({.hardware = 8, .affinity = 8, .local_ranks = 4}, 4);
  EXPECT_NE(crowded.find("4 ranks on this node of 8 CPUs: 16 threads"), std::string::npos) << crowded;
  EXPECT_NE(crowded.find("automatic: 2 per rank"), std::string::npos) << crowded;
  // What fits says nothing.
  EXPECT_EQ(oversubscription({.hardware = 8, .affinity = 2, .local_ranks = 4}, 2), "");
  EXPECT_EQ(oversubscription({.hardware = 8, .affinity = 0, .local_ranks = 8}, 1), "");
  EXPECT_EQ(oversubscription({.hardware = 2, .affinity = 1, .local_ranks = 2}, 1), "");
  // More ranks than CPUs: one thread each is what automatic gives, so only fewer ranks help.
  EXPECT_EQ(oversubscription({.hardware = 2, .affinity = 0, .local_ranks = 3}, 1),
            "3 ranks on this node of 2 CPUs at 1 thread each: 3 threads share them; run at most 2 ranks per node");
}

TEST(Runtime, RejectsNegativeThreads) {
  Context& ctx = test::context();
  EXPECT_THROW(ctx.bind(Device::cpu, -1), ConfigError);
  EXPECT_THROW(ctx.bind(Device::cuda, -1), ConfigError);
}

TEST(Runtime, CudaBindingFallsBackToTheCpuWithoutAGpu) {
  Context& ctx = test::context();
  ctx.bind(Device::cuda, 1);
  if (ctx.binding().backend == Device::cuda) {
    EXPECT_GE(ctx.binding().device, 0);
  } else {  // no GPU here (or no CUDA in this build): the CPU backend, with the threads asked for
    EXPECT_EQ(ctx.binding().backend, Device::cpu);
    EXPECT_EQ(ctx.binding().device, -1);
    EXPECT_EQ(ctx.binding().threads, 1);
  }
  EXPECT_EQ(ctx.world_size(), 1);
  EXPECT_EQ(ctx.local_rank(), 0);
  EXPECT_EQ(ctx.node_count(), 1);
}

}  // namespace
}  // namespace ringtrain
