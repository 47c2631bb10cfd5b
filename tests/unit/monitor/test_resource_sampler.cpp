// ResourceSampler on a CPU machine: samples arrive every interval with CPU utilization that
// sees a busy thread, memory that sees an allocation, no GPU reading without NVML, and a
// bounded buffer; interval 0 samples nothing. NVML's GPU path is tools/device/'s to check.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "monitor/nvml_loader.hpp"
#include "ringtrain/monitor/resource_sampler.hpp"

namespace ringtrain {
namespace {

void spin_for(std::chrono::milliseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  volatile double x = 0.0;
  while (std::chrono::steady_clock::now() < end) x = x + 1.0;
}

TEST(ResourceSampler, SamplesCpuAndMemoryEveryInterval) {
  ResourceSampler sampler(20, 0);
  ASSERT_TRUE(sampler.enabled());
  std::vector<char> block(64u << 20);
  std::memset(block.data(), 1, block.size());  // touched: resident
  spin_for(std::chrono::milliseconds(300));
  const auto samples = sampler.drain();
  ASSERT_GE(samples.size(), 5u);
  double cpu_max = 0.0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (i > 0) EXPECT_GT(samples[i].t_s, samples[i - 1].t_s);
    EXPECT_GE(samples[i].cpu_percent, 0.0);
    cpu_max = std::max(cpu_max, samples[i].cpu_percent);
  }
  EXPECT_GT(cpu_max, 30.0) << "a spinning thread should show";
  EXPECT_GT(samples.back().rss_mib, 64.0);
  EXPECT_TRUE(sampler.drain().size() <= 1u) << "drain takes the buffered samples";
  const ResourceSummary s = sampler.summary();
  EXPECT_GE(s.samples, static_cast<std::int64_t>(samples.size()));
  EXPECT_GE(s.rss_peak_mib, 64.0);
  EXPECT_GE(s.cpu_max_percent, s.cpu_mean_percent);
}

TEST(ResourceSampler, SaysClearlyWhenThereIsNoGpuTelemetry) {
  const NvmlTelemetry nvml;
  ResourceSampler sampler(10, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  if (nvml.available()) GTEST_SKIP() << "NVML present: tools/device/check-monitor-doctor.sh checks the GPU path";
  EXPECT_EQ(nvml.unavailable_reason(), "libnvidia-ml.so.1 not found");
  EXPECT_NE(sampler.describe().find("no GPU telemetry (libnvidia-ml.so.1 not found)"), std::string::npos)
      << sampler.describe();
  for (const auto& s : sampler.drain()) EXPECT_FALSE(s.gpu.has_value());
  EXPECT_FALSE(sampler.summary().gpu);
}

TEST(ResourceSampler, BufferIsBounded) {
  ResourceSampler sampler(1, -1);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_LE(sampler.drain().size(), ResourceSampler::kMaxBuffered);
  EXPECT_GT(sampler.summary().samples, 0);
}

TEST(ResourceSampler, IntervalZeroIsOff) {
  ResourceSampler sampler(0, 0);
  EXPECT_FALSE(sampler.enabled());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(sampler.drain().empty());
  EXPECT_EQ(sampler.summary().samples, 0);
  EXPECT_NE(sampler.describe().find("off"), std::string::npos);
}

}  // namespace
}  // namespace ringtrain
