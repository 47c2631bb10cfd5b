// Private: NVML (the NVIDIA driver's management library) loaded at run time with dlopen, so
// builds and CPU machines need neither nvml.h nor libnvidia-ml. The few C entry points used
// are declared here; every call is checked, and an absent library is a state, not an error.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "ringtrain/monitor/resource_sampler.hpp"

namespace ringtrain {

class NvmlTelemetry {
 public:
  // Loads libnvidia-ml.so.1 and initialises NVML; never throws. On failure available() is
  // false and unavailable_reason() says why ("libnvidia-ml.so.1 not found", ...).
  NvmlTelemetry();
  ~NvmlTelemetry();
  NvmlTelemetry(const NvmlTelemetry&) = delete;
  NvmlTelemetry& operator=(const NvmlTelemetry&) = delete;

  bool available() const { return lib_ != nullptr; }
  const std::string& unavailable_reason() const { return why_; }
  std::string driver_version() const;  // e.g. "580.95.05"; "" when unknown
  int device_count() const;            // every GPU of the node (NVML ignores CUDA_VISIBLE_DEVICES)
  std::string device_name(int index) const;
  // The NVML index of CUDA ordinal `ordinal` (taken modulo the visible GPUs, as Context::bind
  // does with local ranks): through the entries of CUDA_VISIBLE_DEVICES (indices or GPU-UUIDs)
  // when set, else the same number. CUDA's default order equals NVML's (PCI) order on nodes of
  // one GPU model. -1 with *why when it cannot be resolved (MIG instances, no GPU).
  int index_of_cuda_ordinal(int ordinal, std::string* why) const;
  // One reading of device `index`; fields the device does not report stay kNoReading.
  GpuReading read(int index) const;

  struct Api;  // the resolved entry points

 private:
  void* lib_ = nullptr;
  std::unique_ptr<Api> api_;
  std::string why_;
};

}  // namespace ringtrain
