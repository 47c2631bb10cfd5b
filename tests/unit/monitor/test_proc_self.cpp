// /proc/self parsing: utime + stime after a command name holding spaces and parentheses,
// status keys in kB, malformed text as nullopt; the live readers on this Linux machine.
#include <gtest/gtest.h>

#include "monitor/proc_self.hpp"

namespace ringtrain::proc {
namespace {

TEST(ProcSelf, CpuTicksAreUtimePlusStimeAfterTheCommandName) {
  // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
  const char* stat = "4242 (ring (train) x) R 1 4242 4242 0 -1 4194304 100 0 0 0 1234 56 0 0 20 0 3 0";
  EXPECT_EQ(cpu_ticks_from_stat(stat), 1234 + 56);
}

TEST(ProcSelf, MalformedStatIsNullopt) {
  EXPECT_EQ(cpu_ticks_from_stat("4242 ringtrain R 1 2"), std::nullopt);      // no ')'
  EXPECT_EQ(cpu_ticks_from_stat("4242 (ringtrain) R 1 2 3"), std::nullopt);  // too few fields
  EXPECT_EQ(cpu_ticks_from_stat("1 (x) R 1 1 1 0 -1 0 0 0 0 0 abc 5"), std::nullopt);
}

TEST(ProcSelf, StatusKeysInKilobytes) {
  const char* status = "Name:\tringtrain\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nVmRSSX:\t1 kB\n";
  EXPECT_EQ(kb_from_status(status, "VmRSS"), 102400);
  EXPECT_EQ(kb_from_status(status, "VmHWM"), 204800);
  EXPECT_EQ(kb_from_status(status, "VmSwap"), std::nullopt);
  EXPECT_EQ(kb_from_status("VmRSS:\t\n", "VmRSS"), std::nullopt);
}

TEST(ProcSelf, LiveReadingsOfThisProcess) {
  const auto cpu = self_cpu_seconds();
  ASSERT_TRUE(cpu.has_value());
  EXPECT_GE(*cpu, 0.0);
  const auto mem = self_memory();
  ASSERT_TRUE(mem.has_value());
  EXPECT_GT(mem->rss_mib, 0.0);
  EXPECT_GE(mem->peak_mib, mem->rss_mib);
}

}  // namespace
}  // namespace ringtrain::proc
