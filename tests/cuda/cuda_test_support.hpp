// Shared helpers for every CUDA test (kernels, nn wrappers, model): GPU detection, device buffers
// (raw or holding f32, bf16 or f16 values filled from and read back as f32), NaN poisoning, a size
// that makes grid-stride loops take a second turn, and the error measures: element by element,
// relative to the element's own size or, near zero, to the tensor's typical size (infinite when the
// GPU left a NaN or Inf, e.g. unwritten); optimizers' updates compared as updates.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/tensor/dtype.hpp"
#include "support/test_context.hpp"

namespace ringtrain::test {

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define RT_SKIP_WITHOUT_GPU() \
  if (!::ringtrain::test::have_gpu()) GTEST_SKIP() << "no CUDA device"

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

inline constexpr DType kFloatDTypes[] = {DType::f32, DType::bf16, DType::f16};

// More elements than one grid of the kernels' launches covers (65,535 blocks of 256 threads,
// kernels/launch.cuh), so every grid-stride loop takes a second turn.
inline constexpr std::size_t kBeyondOneGrid = std::size_t{65'535} * 256 + 1'003;

// The documented relative-error bound for values stored as `dtype` (f32 < 1e-5, bf16/f16 < 1e-2).
inline double tolerance(DType dtype) { return dtype == DType::f32 ? kTolF32 : kTolHalf; }

// f32 -> dtype -> f32: the value the device holds after upload (or after it stores v).
inline float round_to(DType dtype, float v) {
  switch (dtype) {
    case DType::bf16: return bf16_to_float(float_to_bf16(v));
    case DType::f16: return f16_to_float(float_to_f16(v));
    default: return v;
  }
}

inline std::vector<float> round_to(DType dtype, std::vector<float> v) {
  for (float& x : v) x = round_to(dtype, x);
  return v;
}

// Uniform in [-scale, scale), already representable in dtype (the CPU reference then sees
// exactly the device's inputs).
inline std::vector<float> random_values(std::size_t n, std::uint64_t seed, DType dtype = DType::f32,
                                        float scale = 1.0f) {
  Rng rng(stream_key(seed));
  std::vector<float> v(n);
  for (float& x : v) x = round_to(dtype, scale * (2.0f * rng.uniform() - 1.0f));
  return v;
}

// Host bytes of values stored as dtype (f32, bf16, f16), and back.
inline std::vector<std::uint8_t> encode(const std::vector<float>& values, DType dtype) {
  std::vector<std::uint8_t> raw(values.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::f32) {
      std::memcpy(raw.data() + 4 * i, &values[i], 4);
    } else {
      const std::uint16_t h = dtype == DType::bf16 ? float_to_bf16(values[i]) : float_to_f16(values[i]);
      std::memcpy(raw.data() + 2 * i, &h, 2);
    }
  }
  return raw;
}

inline std::vector<float> decode(const std::vector<std::uint8_t>& raw, DType dtype) {
  std::vector<float> values(raw.size() / dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::f32) {
      std::memcpy(&values[i], raw.data() + 4 * i, 4);
    } else {
      std::uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      values[i] = dtype == DType::bf16 ? bf16_to_float(h) : f16_to_float(h);
    }
  }
  return values;
}

// Device memory of a given size; new buffers are poisoned (every byte 0xff: NaN in f32, bf16
// and f16, 255 in u8, -1 in i32), so an element a kernel fails to write shows.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&ptr_, std::max<std::size_t>(bytes_, 1)), cudaSuccess);
    poison();
  }
  template <typename T>
  static DeviceBuffer of(const std::vector<T>& host) {
    DeviceBuffer b(host.size() * sizeof(T));
    EXPECT_EQ(cudaMemcpy(b.ptr_, host.data(), b.bytes_, cudaMemcpyHostToDevice), cudaSuccess);
    return b;
  }
  static DeviceBuffer of_values(const std::vector<float>& values, DType dtype) { return of(encode(values, dtype)); }

  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  ~DeviceBuffer() { cudaFree(ptr_); }

  void* get() const { return ptr_; }
  // The address `offset` bytes in (a view starting there: one element in is not 16-byte aligned).
  void* at(std::size_t offset) const { return static_cast<char*>(ptr_) + offset; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void poison() { EXPECT_EQ(cudaMemset(ptr_, 0xff, bytes_), cudaSuccess); }

  // The whole buffer, after the device has finished its work.
  template <typename T>
  std::vector<T> read() const {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<T> host(bytes_ / sizeof(T));
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, host.size() * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  std::vector<float> read_values(DType dtype) const { return decode(read<std::uint8_t>(), dtype); }
  // The bytes from `offset` on, after the device has finished its work.
  std::vector<std::uint8_t> bytes_from(std::size_t offset) const {
    const std::vector<std::uint8_t> all = read<std::uint8_t>();
    return {all.begin() + static_cast<std::ptrdiff_t>(std::min(offset, all.size())), all.end()};
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_;
};

// ||got - ref||_2 / ||ref||_2 (the plain norm of the difference when ref is zero), infinite when
// got holds a non-finite value (an unwritten output): whole trained models against each other.
inline double l2_rel_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    diff += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// The largest error of gpu against ref under a mixed bound, element by element:
// |gpu_i - ref_i| / (|ref_i| + rms(ref)), so each element is judged against its own size and,
// near zero, against the tensor's root-mean-square (not its largest element, which would let
// small elements be wrong unseen). Infinity when gpu holds a NaN or Inf where ref is finite, or a
// finite value where ref is NaN.
inline double max_rel_error(const std::vector<float>& gpu, const std::vector<float>& ref) {
  EXPECT_EQ(gpu.size(), ref.size());
  const std::size_t n = std::min(gpu.size(), ref.size());
  double squares = 0.0;
  for (std::size_t i = 0; i < n; ++i)
    if (std::isfinite(ref[i])) squares += static_cast<double>(ref[i]) * ref[i];
  const double rms = std::sqrt(squares / static_cast<double>(std::max<std::size_t>(n, 1)));
  double worst = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isfinite(gpu[i]) != std::isfinite(ref[i]) || std::isnan(gpu[i]) != std::isnan(ref[i]))
      return std::numeric_limits<double>::infinity();
    if (!std::isfinite(ref[i])) {
      if (!std::isnan(ref[i]) && gpu[i] != ref[i]) return std::numeric_limits<double>::infinity();  // +Inf for -Inf
      continue;
    }
    const double bound = std::fabs(static_cast<double>(ref[i])) + std::max(rms, 1e-30);
    worst = std::max(worst, std::fabs(static_cast<double>(gpu[i]) - ref[i]) / bound);
  }
  return worst;
}

// The largest error of an optimizer's update on the GPU (gpu - before) against the CPU's
// (cpu - before), under max_rel_error's bound on the CPU's update, less `steps` units in the last
// place of the parameter: each step stores the parameter rounded to f32, and the GPU, which
// contracts p - lr * u into one fused multiply-add, may round it to the neighbouring float where
// the CPU does not. Comparing the parameters themselves would hide a wrong update under their
// size; comparing the differences alone would count those roundings against updates 10^5 times
// smaller than the parameters.
inline double max_update_error(const std::vector<float>& gpu, const std::vector<float>& cpu,
                               const std::vector<float>& before, int steps) {
  EXPECT_EQ(gpu.size(), before.size());
  EXPECT_EQ(cpu.size(), before.size());
  const std::size_t n = std::min({gpu.size(), cpu.size(), before.size()});
  double squares = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double update = static_cast<double>(cpu[i]) - before[i];
    if (std::isfinite(update)) squares += update * update;
  }
  const double rms = std::sqrt(squares / static_cast<double>(std::max<std::size_t>(n, 1)));
  double worst = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isfinite(gpu[i]) != std::isfinite(cpu[i])) return std::numeric_limits<double>::infinity();
    if (!std::isfinite(cpu[i])) continue;
    const float magnitude = std::max(std::fabs(gpu[i]), std::fabs(cpu[i]));
    const double ulp =
        static_cast<double>(std::nextafter(magnitude, std::numeric_limits<float>::infinity())) - magnitude;
    const double excess = std::max(0.0, std::fabs(static_cast<double>(gpu[i]) - cpu[i]) - steps * ulp);
    const double bound = std::fabs(static_cast<double>(cpu[i]) - before[i]) + std::max(rms, 1e-30);
    worst = std::max(worst, excess / bound);
  }
  return worst;
}

// got and ref hold the same bytes element by element; on failure, reports how many differ and
// the first (not the whole vector: sizes reach 10^6).
template <typename T>
void expect_same_bits(const std::vector<T>& got, const std::vector<T>& ref) {
  ASSERT_EQ(got.size(), ref.size());
  std::size_t mismatches = 0, first = 0;
  for (std::size_t i = 0; i < ref.size(); ++i)
    if (std::memcmp(&got[i], &ref[i], sizeof(T)) != 0 && mismatches++ == 0) first = i;
  EXPECT_EQ(mismatches, 0u) << "of " << ref.size() << " elements; first at " << first;
}

// f() must throw ringtrain::Error whose message contains `text`.
template <typename F>
void expect_error_naming(F&& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no error (expected one naming " << text << ")";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

inline void expect_close(const std::vector<float>& gpu, const std::vector<float>& ref, double tol) {
  EXPECT_LT(max_rel_error(gpu, ref), tol);
}

}  // namespace ringtrain::test
