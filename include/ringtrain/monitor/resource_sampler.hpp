// ResourceSampler: a per-rank thread that samples this process's CPU utilization and memory
// (from /proc) and, where NVML loads at run time, its GPU's telemetry, every interval_ms.
// Samples wait in a bounded buffer until drained; running aggregates cover every sample.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace ringtrain {

inline constexpr double kNoReading = std::numeric_limits<double>::quiet_NaN();

// One GPU reading; a field the device does not report stays kNoReading (throttle_reasons: 0).
struct GpuReading {
  int index = -1;                    // NVML device index
  double util_percent = kNoReading;  // SM busy share of the last sample period
  double mem_used_mib = kNoReading;
  double power_w = kNoReading;
  double temp_c = kNoReading;
  double sm_clock_mhz = kNoReading;
  std::uint64_t throttle_reasons = 0;  // NVML clocks event reason bits (GPU idle = 1)
};

struct ResourceSample {
  double t_s = 0.0;          // seconds since the sampler started
  double cpu_percent = 0.0;  // process CPU time / wall time over the interval (100 = one core)
  double rss_mib = 0.0;      // resident memory now
  std::optional<GpuReading> gpu;
};

// Aggregates over every sample taken (not only the buffered ones).
struct ResourceSummary {
  std::int64_t samples = 0;
  double cpu_mean_percent = 0.0, cpu_max_percent = 0.0;
  double rss_peak_mib = 0.0;  // the kernel's high-water mark (VmHWM), not only sampled values
  bool gpu = false;           // every field below only when true
  double gpu_util_mean_percent = 0.0, gpu_util_max_percent = 0.0;
  double gpu_mem_peak_mib = 0.0, gpu_power_max_w = 0.0, gpu_temp_max_c = 0.0;
  std::uint64_t gpu_throttle_reasons = 0;  // union over all samples
};

class NvmlTelemetry;  // src/monitor/nvml_loader.hpp

class ResourceSampler {
 public:
  // interval_ms 0: no thread, no samples. gpu_ordinal: the CUDA ordinal of this rank's GPU
  // (-1: none), modulo the visible GPUs; mapped to an NVML device through CUDA_VISIBLE_DEVICES.
  ResourceSampler(int interval_ms, int gpu_ordinal);
  ~ResourceSampler();
  ResourceSampler(const ResourceSampler&) = delete;
  ResourceSampler& operator=(const ResourceSampler&) = delete;

  bool enabled() const { return interval_ms_ > 0; }
  // One line for the user: what is sampled, e.g. "cpu + memory; no GPU telemetry
  // (libnvidia-ml.so.1 not found)" or "cpu + memory + gpu 0 (NVIDIA H200)".
  const std::string& describe() const { return description_; }
  // Takes the buffered samples (oldest first); at most kMaxBuffered wait, older ones are dropped.
  std::vector<ResourceSample> drain();
  ResourceSummary summary() const;

  static constexpr std::size_t kMaxBuffered = 4096;

 private:
  void loop();
  void take_sample();

  int interval_ms_;
  std::unique_ptr<NvmlTelemetry> nvml_;
  int nvml_index_ = -1;
  std::string description_;
  std::chrono::steady_clock::time_point start_, last_wall_;
  double last_cpu_s_ = 0.0;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::deque<ResourceSample> buffer_;
  ResourceSummary totals_;
  double cpu_sum_ = 0.0, gpu_util_sum_ = 0.0;
  std::int64_t gpu_util_samples_ = 0;
  std::thread thread_;
};

}  // namespace ringtrain
