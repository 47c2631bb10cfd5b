// ResourceSampler (see header). The first sample comes one interval after the start (CPU
// utilization is a difference of two readings); the thread sleeps on a condition variable,
// so destruction never waits out an interval.
#include "ringtrain/monitor/resource_sampler.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "monitor/nvml_loader.hpp"
#include "monitor/proc_self.hpp"

namespace ringtrain {
namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

ResourceSampler::ResourceSampler(int interval_ms, int gpu_ordinal) : interval_ms_(std::max(0, interval_ms)) {
  if (!enabled()) {
    description_ = "off (monitor.interval_ms = 0)";
    return;
  }
  description_ = fmt::format("every {} ms: cpu + memory", interval_ms_);
  nvml_ = std::make_unique<NvmlTelemetry>();
  if (!nvml_->available()) {
    description_ += fmt::format("; no GPU telemetry ({})", nvml_->unavailable_reason());
  } else if (gpu_ordinal < 0) {
    description_ += "; no GPU for this rank (NVML loaded)";
  } else {
    std::string why;
    nvml_index_ = nvml_->index_of_cuda_ordinal(gpu_ordinal, &why);
    description_ += nvml_index_ < 0 ? fmt::format("; no GPU telemetry ({})", why)
                                    : fmt::format(" + gpu {} ({}, NVML)", nvml_index_, nvml_->device_name(nvml_index_));
  }
  start_ = last_wall_ = std::chrono::steady_clock::now();
  last_cpu_s_ = proc::self_cpu_seconds().value_or(0.0);
  thread_ = std::thread([this] { loop(); });
}

ResourceSampler::~ResourceSampler() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void ResourceSampler::loop() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [this] { return stopping_; })) {
    lock.unlock();
    take_sample();
    lock.lock();
  }
}

void ResourceSampler::take_sample() {
  ResourceSample s;
  const auto now = std::chrono::steady_clock::now();
  const double cpu_s = proc::self_cpu_seconds().value_or(last_cpu_s_);
  const double wall_s = seconds_between(last_wall_, now);
  s.t_s = seconds_between(start_, now);
  s.cpu_percent = wall_s > 0.0 ? 100.0 * (cpu_s - last_cpu_s_) / wall_s : 0.0;
  last_cpu_s_ = cpu_s;
  last_wall_ = now;
  if (const auto mem = proc::self_memory()) s.rss_mib = mem->rss_mib;
  if (nvml_index_ >= 0) s.gpu = nvml_->read(nvml_index_);

  std::lock_guard lock(mutex_);
  ResourceSummary& t = totals_;
  ++t.samples;
  cpu_sum_ += s.cpu_percent;
  t.cpu_max_percent = std::max(t.cpu_max_percent, s.cpu_percent);
  t.cpu_mean_percent = cpu_sum_ / static_cast<double>(t.samples);
  t.rss_peak_mib = std::max(t.rss_peak_mib, s.rss_mib);
  if (s.gpu) {
    const GpuReading& g = *s.gpu;
    t.gpu = true;
    // std::fmax ignores a kNoReading (NaN) operand.
    if (!std::isnan(g.util_percent)) {
      gpu_util_sum_ += g.util_percent;
      t.gpu_util_mean_percent = gpu_util_sum_ / static_cast<double>(++gpu_util_samples_);
    }
    t.gpu_util_max_percent = std::fmax(t.gpu_util_max_percent, g.util_percent);
    t.gpu_mem_peak_mib = std::fmax(t.gpu_mem_peak_mib, g.mem_used_mib);
    t.gpu_power_max_w = std::fmax(t.gpu_power_max_w, g.power_w);
    t.gpu_temp_max_c = std::fmax(t.gpu_temp_max_c, g.temp_c);
    t.gpu_throttle_reasons |= g.throttle_reasons;
  }
  buffer_.push_back(s);
  if (buffer_.size() > kMaxBuffered) buffer_.pop_front();
}

std::vector<ResourceSample> ResourceSampler::drain() {
  std::lock_guard lock(mutex_);
  std::vector<ResourceSample> out(buffer_.begin(), buffer_.end());
  buffer_.clear();
  return out;
}

ResourceSummary ResourceSampler::summary() const {
  ResourceSummary s;
  {
    std::lock_guard lock(mutex_);
    s = totals_;
  }
  if (const auto mem = proc::self_memory()) s.rss_peak_mib = std::max(s.rss_peak_mib, mem->peak_mib);
  return s;
}

}  // namespace ringtrain
