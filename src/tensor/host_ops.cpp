// HostOps' memory and element-wise operations (see host_ops.hpp), and device_ops(): the one
// place a device is mapped to its operations.
#include "tensor/host_ops.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "cuda/gpu_backend.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/tensor/rounding.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {
namespace {

// Host allocations from this size up are mapped rather than allocated (page-aligned, zero, lazy).
constexpr std::size_t kMappedBytes = std::size_t{1} << 20;
std::atomic<std::int64_t> mapped_bytes{0};  // host_mapped_bytes()

// The out-of-memory tests' hook (docs/RELIABILITY.md): RINGTRAIN_TEST_OOM=<n> makes this
// process's n-th host tensor allocation fail as an exhausted heap would.
bool injected_out_of_memory() {
  static const std::int64_t fail_at = [] {
    const char* n = std::getenv("RINGTRAIN_TEST_OOM");
    if (n == nullptr) return std::int64_t{0};
    char* end = nullptr;
    errno = 0;
    const std::int64_t at = std::strtoll(n, &end, 10);
    if (errno != 0 || end == n || *end != '\0') {  // a test harness's mistake: never run on without the hook
      std::fprintf(stderr, "RINGTRAIN_TEST_OOM='%s' is not an integer\n", n);
      std::abort();
    }
    return at;
  }();
  static std::atomic<std::int64_t> allocations{0};
  return fail_at > 0 && ++allocations == fail_at;
}

}  // namespace

const DeviceOps& device_ops(Device device) {
  static const HostOps host;
  if (device == Device::cuda) return gpu("memory or operations on the GPU");
  return host;
}

std::shared_ptr<void> HostOps::allocate_zeroed(std::size_t bytes) const {
  if (injected_out_of_memory()) throw std::bad_alloc();
  if (bytes >= kMappedBytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    mapped_bytes += static_cast<std::int64_t>(bytes);
    return {p, [bytes](void* q) {
              if (::munmap(q, bytes) != 0) log::warn("tensor: munmap of {} bytes: {}", bytes, std::strerror(errno));
              mapped_bytes -= static_cast<std::int64_t>(bytes);
            }};
  }
  void* p = std::aligned_alloc(kAllocationAlignment, bytes);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return {p, [](void* q) { std::free(q); }};
}

std::int64_t HostOps::release_pages(void* data, std::size_t bytes) const {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t end = begin + bytes;
  const std::uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (last <= first) return 0;
  // NOLINTNEXTLINE(performance-no-int-to-ptr): madvise takes the page-aligned address
  if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0)
    throw Error(fmt::format("tensor: madvise(MADV_DONTNEED) of {} bytes: {}", last - first, std::strerror(errno)));
  return static_cast<std::int64_t>(last - first);
}

void HostOps::copy(void* dst, const void* src, std::size_t bytes) const { std::memmove(dst, src, bytes); }

void HostOps::zero(void* dst, std::size_t bytes) const { std::memset(dst, 0, bytes); }

void HostOps::add_into(void* dst, const void* src, std::int64_t n, DType dtype) const {
  RT_REQUIRE(dtype == DType::f32, Error, "add_into on the host: {} elements are not f32", dtype_name(dtype));
  float* d = static_cast<float*>(dst);
  const auto* s = static_cast<const float*>(src);
  for (std::int64_t i = 0; i < n; ++i) d[i] += s[i];
}

void HostOps::add_into_each(float* const* dsts, int count, const float* src, std::int64_t n) const {
  // One fused loop, every target streamed side by side as an update streams its arenas.
  auto add = [src, n](auto*... d) {
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = src[i];
      ((d[i] += v), ...);
    }
  };
  switch (count) {
    case 1: return add(dsts[0]);
    case 2: return add(dsts[0], dsts[1]);
    case 3: return add(dsts[0], dsts[1], dsts[2]);
    case 4: return add(dsts[0], dsts[1], dsts[2], dsts[3]);
    default: throw Error(fmt::format("add_into_each on the host: {} targets (1..4)", count));
  }
}

bool HostOps::has_nonfinite(const float* x, std::int64_t n) const { return ringtrain::has_nonfinite(x, n); }

double HostOps::sum_of_squares(const float* x, std::int64_t n) const {
  // kLanes independent sums (lane k takes the elements i with i % kLanes == k), combined in
  // lane order: a fixed order, without the one long chain of dependent additions.
  constexpr std::int64_t kLanes = 8;
  double lane[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::int64_t k = 0; k < kLanes; ++k) lane[k] += static_cast<double>(x[i + k]) * x[i + k];
  for (std::int64_t k = 0; i + k < n; ++k) lane[k] += static_cast<double>(x[i + k]) * x[i + k];
  double sum = 0.0;
  for (const double v : lane) sum += v;
  return sum;
}

void HostOps::apply_mask(float* x, const float* mask, std::int64_t n) const {
  for (std::int64_t i = 0; i < n; ++i)
    if (mask[i] == 0.0f) x[i] = 0.0f;
}

std::int64_t host_mapped_bytes() { return mapped_bytes.load(); }

std::int64_t release_host_pages(float* data, std::int64_t count) {
  if (count <= 0) return 0;
  return device_ops(Device::cpu).release_pages(data, static_cast<std::size_t>(count) * sizeof(float));
}

}  // namespace ringtrain
