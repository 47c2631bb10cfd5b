// Device: where a tensor lives and computes, and the backend a rank is bound to (the one
// representation of both: runtime.backend, Context::bind, Tensor, Model). The GPU side of a
// build is reached through src/cuda/gpu_backend.hpp.
#pragma once
#include <cstdint>

namespace ringtrain {

enum class Device : std::uint8_t { cpu, cuda };

// "cpu" or "cuda", as runtime.backend and --backend spell it.
constexpr const char* device_name(Device device) { return device == Device::cuda ? "cuda" : "cpu"; }

}  // namespace ringtrain
