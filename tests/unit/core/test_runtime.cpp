// Context binding: CPU thread split, rejected values, and CUDA binding (a clear error
// without a GPU or without CUDA in the build; local rank mod GPUs with one).
#include <gtest/gtest.h>

#include "ringtrain/core/error.hpp"
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
