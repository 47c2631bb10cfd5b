// Shape and Tensor: a typed, shaped view into shared storage on the host or on the CUDA device
// (from the caching pool), 256-byte aligned on both. Views share storage (slices of a flat arena are
// Tensors too); only Tensor::empty allocates. Device data is never dereferenced on the host.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/core/device.hpp"
#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<std::int64_t> dims) : dims_(std::move(dims)) {}

  std::size_t rank() const { return dims_.size(); }
  std::int64_t operator[](std::size_t i) const { return dims_[i]; }
  std::int64_t& operator[](std::size_t i) { return dims_[i]; }
  std::int64_t numel() const;
  const std::vector<std::int64_t>& dims() const { return dims_; }
  // The same shape with a leading dimension n in front (per-sample -> batch).
  Shape with_batch(std::int64_t n) const;
  // The shape without its leading dimension (batch -> per-sample).
  Shape sample() const;
  std::string str() const;  // "[64, 1, 28, 28]"
  bool operator==(const Shape&) const = default;

 private:
  std::vector<std::int64_t> dims_;
};

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled. Device::cuda allocates on the current GPU (NotCompiled without CUDA).
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  // Zero-filled memory whose pages can be released and committed again (release_pages,
  // commit_pages): on the host what empty() gives; on the GPU reserved address space mapped one
  // granule at a time (CUDA virtual memory management).
  static Tensor reservable(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  // A non-owning view of memory the caller keeps alive, on `device` (where data points).
  static Tensor wrap(void* data, const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);

  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  std::int64_t numel() const { return shape_.numel(); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return data_ != nullptr || numel() == 0; }

  void* raw() const { return data_; }
  float* f32() const;  // checks dtype
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_);
  }

  Tensor reshape(const Shape& shape) const;                          // same elements, new shape
  Tensor rows(std::int64_t begin, std::int64_t count) const;         // view along dimension 0
  Tensor flat_slice(std::int64_t offset, const Shape& shape) const;  // view at element offset

 private:
  // empty (reservable = false) or reservable: zeroed memory from the device's operations.
  static Tensor allocate(const Shape& shape, DType dtype, Device device, bool reservable);

  std::shared_ptr<void> storage_;  // keeps owned memory alive; null for wrapped views
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
};

// Copies src into dst (same dtype and element count; any pair of devices). Device copies are
// ordered on the default stream, and a copy to the host returns when the data is there.
void copy_into(const Tensor& dst, const Tensor& src);
// t itself when it is on the host, else a host copy of it.
Tensor to_host(const Tensor& t);
// The bytes t's elements take: 0 for a default-constructed (unallocated) tensor.
inline std::size_t allocated_bytes(const Tensor& t) { return t.raw() != nullptr ? t.nbytes() : 0; }
// Bytes of the host tensors alive that Tensor::empty mapped (the large ones), whether or not
// their pages are resident yet.
std::int64_t host_mapped_bytes();
// Returns the whole memory pages inside count floats of host memory from data to the operating
// system (madvise MADV_DONTNEED): they stop counting as resident and read as zero until written
// again. Elements on pages shared with memory outside the range keep their values. Returns the
// bytes released.
std::int64_t release_host_pages(float* data, std::int64_t count);
// The same for count floats at data on `device`: on the host release_host_pages; on the GPU,
// within a Tensor::reservable, the whole granules inside the range are unmapped (after a device
// synchronize) and then must not be used until commit_pages. Returns the bytes released.
std::int64_t release_pages(float* data, std::int64_t count, Device device);
// Makes count floats at data usable again after release_pages (their values unspecified until
// written): nothing to do on the host (a released page comes back when written); on the GPU,
// within a Tensor::reservable, every unmapped granule of the range is mapped.
void commit_pages(float* data, std::int64_t count, Device device);
// The bytes of the GPU Tensor::reservable holding `data` that are mapped (what it occupies).
std::int64_t reserved_mapped_bytes(const void* data);

}  // namespace ringtrain
