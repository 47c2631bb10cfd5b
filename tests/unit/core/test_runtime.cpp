// Context binding: CPU thread split, rejected values, and CUDA binding (a clear error
// without a GPU or without CUDA in the build; local rank mod GPUs with one).
#include <gtest/gtest.h>

#include "ringtrain/core/error.hpp"
#include "support/test_context.hpp"

namespace ringtrain {
namespace {

TEST(Runtime, CpuBindingGivesAtLeastOneThread) {
  Context& ctx = test::context();
  ctx.bind("cpu", 0);
  EXPECT_EQ(ctx.binding().backend, "cpu");
  EXPECT_GE(ctx.binding().threads, 1);
  ctx.bind("cpu", 3);
  EXPECT_EQ(ctx.binding().threads, 3);
  ctx.bind("cpu", 1);
}

TEST(Runtime, RejectsBadBackendAndThreads) {
  Context& ctx = test::context();
  EXPECT_THROW(ctx.bind("cpu", -1), ConfigError);
  try {
    ctx.bind("tpu", 0);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("tpu"), std::string::npos) << e.what();
  }
}

TEST(Runtime, CudaBindingFallsBackToTheCpuWithoutAGpu) {
  Context& ctx = test::context();
  ctx.bind("cuda", 1);
  if (ctx.binding().backend == "cuda") {
    EXPECT_GE(ctx.binding().device, 0);
  } else {  // no GPU here (or no CUDA in this build): the CPU backend, with the threads asked for
    EXPECT_EQ(ctx.binding().backend, "cpu");
    EXPECT_EQ(ctx.binding().device, -1);
    EXPECT_EQ(ctx.binding().threads, 1);
  }
  EXPECT_EQ(ctx.world_size(), 1);
  EXPECT_EQ(ctx.local_rank(), 0);
  EXPECT_EQ(ctx.node_count(), 1);
}

}  // namespace
}  // namespace ringtrain
