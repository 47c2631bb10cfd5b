// Shape and Tensor implementation: aligned zeroed allocation and bounds-checked views. Large
// host tensors are anonymous mappings: zero pages the kernel fills in on first touch, so memory
// a tensor never writes (a gradient arena handed over to ZeRO staging before backward) is never
// resident.
#include "ringtrain/tensor/tensor.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "cuda/gpu_backend.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"

namespace ringtrain {

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (auto d : dims_) n *= d;
  return n;
}

Shape Shape::with_batch(std::int64_t n) const {
  std::vector<std::int64_t> d;
  d.reserve(dims_.size() + 1);
  d.push_back(n);
  d.insert(d.end(), dims_.begin(), dims_.end());
  return Shape(std::move(d));
}

Shape Shape::sample() const {
  RT_REQUIRE(!dims_.empty(), Error, "Shape::sample() of a rank-0 shape");
  return Shape(std::vector<std::int64_t>(dims_.begin() + 1, dims_.end()));
}

std::string Shape::str() const {
  std::string s = "[";
  for (std::size_t i = 0; i < dims_.size(); ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + "]";
}

namespace {
// Host allocations start where cudaMalloc's do (what ParamLayout's aligned offsets assume).
constexpr std::size_t kHostAlignment = 256;
// Host tensors from this size up are mapped rather than allocated (page-aligned, zero, lazy).
constexpr std::size_t kMappedBytes = std::size_t{1} << 20;
std::atomic<std::int64_t> mapped_bytes{0};  // host_mapped_bytes()

// The out-of-memory tests' hook (docs/RELIABILITY.md): RINGTRAIN_TEST_OOM=<n> makes this
// process's n-th host tensor allocation fail as an exhausted heap would.
bool injected_out_of_memory() {
  static const std::int64_t fail_at = [] {
    const char* n = std::getenv("RINGTRAIN_TEST_OOM");
    return n == nullptr ? std::int64_t{0} : std::int64_t{std::atoll(n)};
  }();
  static std::atomic<std::int64_t> allocations{0};
  return fail_at > 0 && ++allocations == fail_at;
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (auto d : shape.dims()) RT_REQUIRE(d >= 0, Error, "Tensor::empty: negative dimension in {}", shape.str());
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  const std::size_t bytes = (t.nbytes() + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  if (bytes == 0) return t;
  if (device == Device::cuda) {
    t.storage_ = gpu("CUDA device memory").allocate_zeroed(bytes);
    t.data_ = t.storage_.get();
    return t;
  }
  if (injected_out_of_memory()) throw std::bad_alloc();
  if (bytes >= kMappedBytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    mapped_bytes += static_cast<std::int64_t>(bytes);
    t.storage_ = std::shared_ptr<void>(p, [bytes](void* q) {
      if (::munmap(q, bytes) != 0) log::warn("tensor: munmap of {} bytes: {}", bytes, std::strerror(errno));
      mapped_bytes -= static_cast<std::int64_t>(bytes);
    });
    t.data_ = p;
    return t;
  }
  void* p = std::aligned_alloc(kHostAlignment, bytes);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  t.storage_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data_ = p;
  return t;
}

Tensor Tensor::reservable(const Shape& shape, DType dtype, Device device) {
  if (device == Device::cpu) return empty(shape, dtype, device);  // a large one is a mapping already
  for (auto d : shape.dims()) RT_REQUIRE(d >= 0, Error, "Tensor::reservable: negative dimension in {}", shape.str());
  Tensor t = wrap(nullptr, shape, dtype, device);
  const std::size_t bytes = (t.nbytes() + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  if (bytes == 0) return t;
  t.storage_ = gpu("CUDA reserved device memory").reserve_pages(bytes);
  t.data_ = t.storage_.get();
  return t;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.data_ = data;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

float* Tensor::f32() const {
  RT_REQUIRE(dtype_ == DType::f32, Error, "tensor of dtype {} used as f32", dtype_name(dtype_));
  return static_cast<float*>(data_);
}

Tensor Tensor::reshape(const Shape& shape) const {
  RT_REQUIRE(shape.numel() == numel(), Error, "reshape {} -> {}: element counts differ", shape_.str(), shape.str());
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::rows(std::int64_t begin, std::int64_t count) const {
  RT_REQUIRE(shape_.rank() >= 1 && begin >= 0 && count >= 0 && begin + count <= shape_[0], Error,
             "rows({}, {}) out of range for {}", begin, count, shape_.str());
  Shape s = shape_;
  s[0] = count;
  const std::int64_t row = shape_[0] == 0 ? 0 : numel() / shape_[0];
  return flat_slice(begin * row, s);
}

Tensor Tensor::flat_slice(std::int64_t offset, const Shape& shape) const {
  RT_REQUIRE(offset >= 0 && offset + shape.numel() <= numel(), Error, "slice at {} of {} elements out of range for {}",
             offset, shape.numel(), shape_.str());
  Tensor t = *this;
  t.shape_ = shape;
  t.data_ = static_cast<char*>(data_) + offset * static_cast<std::int64_t>(dtype_size(dtype_));
  return t;
}

void copy_into(const Tensor& dst, const Tensor& src) {
  RT_REQUIRE(dst.dtype() == src.dtype() && dst.numel() == src.numel(), Error,
             "copy_into: {} {} -> {} {}: dtype or element count differs", dtype_name(src.dtype()), src.shape().str(),
             dtype_name(dst.dtype()), dst.shape().str());
  if (src.nbytes() == 0 || dst.raw() == src.raw()) return;
  if (dst.device() == Device::cpu && src.device() == Device::cpu) {
    std::memmove(dst.raw(), src.raw(), src.nbytes());
    return;
  }
  gpu("CUDA device memory")
      .copy_bytes(dst.raw(), dst.device() == Device::cuda, src.raw(), src.device() == Device::cuda, src.nbytes());
}

Tensor to_host(const Tensor& t) {
  if (t.device() == Device::cpu) return t;
  Tensor host = Tensor::empty(t.shape(), t.dtype());
  copy_into(host, t);
  return host;
}

std::int64_t host_mapped_bytes() { return mapped_bytes.load(); }

std::int64_t release_host_pages(float* data, std::int64_t count) {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t end = begin + static_cast<std::uintptr_t>(count) * sizeof(float);
  const std::uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (count <= 0 || last <= first) return 0;
  // NOLINTNEXTLINE(performance-no-int-to-ptr): madvise takes the page-aligned address
  if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0)
    throw Error(fmt::format("tensor: madvise(MADV_DONTNEED) of {} bytes: {}", last - first, std::strerror(errno)));
  return static_cast<std::int64_t>(last - first);
}

std::int64_t release_pages(float* data, std::int64_t count, Device device) {
  if (device == Device::cpu) return release_host_pages(data, count);
  if (count <= 0) return 0;
  return gpu("CUDA reserved device memory").release_pages(data, static_cast<std::size_t>(count) * sizeof(float));
}

std::int64_t reserved_mapped_bytes(const void* data) { return gpu("CUDA reserved device memory").mapped_bytes(data); }

void commit_pages(float* data, std::int64_t count, Device device) {
  if (device == Device::cpu || count <= 0) return;  // host pages come back when written
  gpu("CUDA reserved device memory").commit_pages(data, static_cast<std::size_t>(count) * sizeof(float));
}

}  // namespace ringtrain
