// NvmlTelemetry (see nvml_loader.hpp). The declarations below follow NVML's C API: return
// codes are an int enum (0 = success), device handles opaque pointers. A reading whose call
// fails (not supported, GPU lost) stays kNoReading; it never ends the run.
#include "monitor/nvml_loader.hpp"

#include <dlfcn.h>

#include <charconv>
#include <cstdlib>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace ringtrain {
namespace {

constexpr const char* kLibrary = "libnvidia-ml.so.1";
constexpr int kSuccess = 0;
constexpr int kTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU
constexpr int kClockSm = 1;         // NVML_CLOCK_SM
constexpr unsigned kTextLength = 96;

using Device = void*;
struct Utilization {
  unsigned gpu, memory;
};
struct Memory {
  unsigned long long total, free, used;
};

}  // namespace

struct NvmlTelemetry::Api {
  int (*init)();
  int (*shutdown)();
  const char* (*error_string)(int);
  int (*driver_version)(char*, unsigned);
  int (*count)(unsigned*);
  int (*handle)(unsigned, Device*);
  int (*name)(Device, char*, unsigned);
  int (*uuid)(Device, char*, unsigned);
  int (*utilization)(Device, Utilization*);
  int (*memory)(Device, Memory*);
  int (*power_mw)(Device, unsigned*);
  int (*temperature)(Device, int, unsigned*);
  int (*clock_mhz)(Device, int, unsigned*);
  int (*clock_reasons)(Device, unsigned long long*);

  Device device(int index) const {
    Device d = nullptr;
    return handle(static_cast<unsigned>(index), &d) == kSuccess ? d : nullptr;
  }
};

namespace {

template <typename F>
bool resolve(void* lib, const char* symbol, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, symbol));
  return fn != nullptr;
}

std::string text_of(int (*fn)(Device, char*, unsigned), Device d) {
  char text[kTextLength] = {};
  return d != nullptr && fn(d, text, kTextLength) == kSuccess ? std::string(text) : std::string();
}

}  // namespace

NvmlTelemetry::NvmlTelemetry() : api_(std::make_unique<Api>()) {
  void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    why_ = fmt::format("{} not found", kLibrary);
    return;
  }
  Api& a = *api_;
  const char* missing = nullptr;
  for (auto [ok, name] :
       {std::pair{resolve(lib, "nvmlInit_v2", a.init), "nvmlInit_v2"},
        {resolve(lib, "nvmlShutdown", a.shutdown), "nvmlShutdown"},
        {resolve(lib, "nvmlErrorString", a.error_string), "nvmlErrorString"},
        {resolve(lib, "nvmlSystemGetDriverVersion", a.driver_version), "nvmlSystemGetDriverVersion"},
        {resolve(lib, "nvmlDeviceGetCount_v2", a.count), "nvmlDeviceGetCount_v2"},
        {resolve(lib, "nvmlDeviceGetHandleByIndex_v2", a.handle), "nvmlDeviceGetHandleByIndex_v2"},
        {resolve(lib, "nvmlDeviceGetName", a.name), "nvmlDeviceGetName"},
        {resolve(lib, "nvmlDeviceGetUUID", a.uuid), "nvmlDeviceGetUUID"},
        {resolve(lib, "nvmlDeviceGetUtilizationRates", a.utilization), "nvmlDeviceGetUtilizationRates"},
        {resolve(lib, "nvmlDeviceGetMemoryInfo", a.memory), "nvmlDeviceGetMemoryInfo"},
        {resolve(lib, "nvmlDeviceGetPowerUsage", a.power_mw), "nvmlDeviceGetPowerUsage"},
        {resolve(lib, "nvmlDeviceGetTemperature", a.temperature), "nvmlDeviceGetTemperature"},
        {resolve(lib, "nvmlDeviceGetClockInfo", a.clock_mhz), "nvmlDeviceGetClockInfo"}})
    if (!ok && missing == nullptr) missing = name;
  // Renamed in newer drivers; older ones only have the throttle name.
  if (!resolve(lib, "nvmlDeviceGetCurrentClocksEventReasons", a.clock_reasons) &&
      !resolve(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", a.clock_reasons) && missing == nullptr)
    missing = "nvmlDeviceGetCurrentClocksEventReasons";
  if (missing != nullptr) {
    why_ = fmt::format("{} lacks {} (driver too old?)", kLibrary, missing);
    dlclose(lib);
    return;
  }
  if (const int rc = a.init(); rc != kSuccess) {
    why_ = fmt::format("nvmlInit failed: {}", a.error_string(rc));
    dlclose(lib);
    return;
  }
  lib_ = lib;
}

NvmlTelemetry::~NvmlTelemetry() {
  if (lib_ == nullptr) return;
  api_->shutdown();  // its result changes nothing at exit
  dlclose(lib_);
}

std::string NvmlTelemetry::driver_version() const {
  char text[kTextLength] = {};
  return available() && api_->driver_version(text, kTextLength) == kSuccess ? std::string(text) : std::string();
}

int NvmlTelemetry::device_count() const {
  unsigned n = 0;
  return available() && api_->count(&n) == kSuccess ? static_cast<int>(n) : 0;
}

std::string NvmlTelemetry::device_name(int index) const {
  return available() ? text_of(api_->name, api_->device(index)) : std::string();
}

int NvmlTelemetry::index_of_cuda_ordinal(int ordinal, std::string* why) const {
  const int count = device_count();
  std::string entry = std::to_string(ordinal);
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
    std::vector<std::string> entries;
    for (std::string_view rest = visible; !rest.empty();) {
      const auto comma = std::min(rest.find(','), rest.size());
      entries.emplace_back(rest.substr(0, comma));
      rest = rest.substr(std::min(comma + 1, rest.size()));
    }
    if (ordinal < 0 || entries.empty()) {
      *why = fmt::format("CUDA ordinal {} is not in CUDA_VISIBLE_DEVICES={}", ordinal, visible);
      return -1;
    }
    entry = entries[static_cast<std::size_t>(ordinal) % entries.size()];
  }
  if (entry.rfind("MIG-", 0) == 0) {
    *why = fmt::format("{} is a MIG instance (no per-instance telemetry here)", entry);
    return -1;
  }
  if (entry.rfind("GPU-", 0) == 0) {  // a UUID or a unique prefix of one, as CUDA accepts
    for (int i = 0; i < count; ++i)
      if (text_of(api_->uuid, api_->device(i)).rfind(entry, 0) == 0) return i;
    *why = fmt::format("no GPU with UUID {}", entry);
    return -1;
  }
  int parsed = -1;
  const auto [end, error] = std::from_chars(entry.data(), entry.data() + entry.size(), parsed);
  if (error != std::errc{} || end != entry.data() + entry.size()) {
    *why = fmt::format("CUDA_VISIBLE_DEVICES entry '{}' is neither a GPU index nor a UUID", entry);
    return -1;
  }
  const int index = count > 0 ? parsed % count : -1;
  if (index < 0) {
    *why = fmt::format("GPU {} not among the node's {} GPUs", entry, count);
    return -1;
  }
  return index;
}

GpuReading NvmlTelemetry::read(int index) const {
  GpuReading r;
  r.index = index;
  const Device d = available() ? api_->device(index) : nullptr;
  if (d == nullptr) return r;
  const Api& a = *api_;
  if (Utilization u{}; a.utilization(d, &u) == kSuccess) r.util_percent = u.gpu;
  if (Memory m{}; a.memory(d, &m) == kSuccess) r.mem_used_mib = static_cast<double>(m.used) / (1024.0 * 1024.0);
  if (unsigned mw = 0; a.power_mw(d, &mw) == kSuccess) r.power_w = mw / 1000.0;
  if (unsigned c = 0; a.temperature(d, kTemperatureGpu, &c) == kSuccess) r.temp_c = c;
  if (unsigned mhz = 0; a.clock_mhz(d, kClockSm, &mhz) == kSuccess) r.sm_clock_mhz = mhz;
  if (unsigned long long bits = 0; a.clock_reasons(d, &bits) == kSuccess) r.throttle_reasons = bits;
  return r;
}

}  // namespace ringtrain
