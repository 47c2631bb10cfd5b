// Shape and Tensor implementation: zeroed allocation from the device's operations
// (tensor/device_ops.hpp; on the host, large tensors are lazily-zeroed mappings) and
// bounds-checked views.
#include "ringtrain/tensor/tensor.hpp"

#include "cuda/gpu_backend.hpp"
#include "ringtrain/core/error.hpp"
#include "tensor/device_ops.hpp"

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

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) { return allocate(shape, dtype, device, false); }

Tensor Tensor::reservable(const Shape& shape, DType dtype, Device device) {
  return allocate(shape, dtype, device, true);
}

Tensor Tensor::allocate(const Shape& shape, DType dtype, Device device, bool reservable) {
  for (auto d : shape.dims())
    RT_REQUIRE(d >= 0, Error, "Tensor::{}: negative dimension in {}", reservable ? "reservable" : "empty", shape.str());
  Tensor t = wrap(nullptr, shape, dtype, device);
  const std::size_t bytes = (t.nbytes() + kAllocationAlignment - 1) / kAllocationAlignment * kAllocationAlignment;
  if (bytes == 0) return t;
  const DeviceOps& ops = device_ops(device);
  t.storage_ = reservable ? ops.reserve_pages(bytes) : ops.allocate_zeroed(bytes);
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
  if (dst.device() == src.device()) return device_ops(dst.device()).copy(dst.raw(), src.raw(), src.nbytes());
  gpu("copies between the host and the GPU")
      .copy_bytes(dst.raw(), dst.device() == Device::cuda, src.raw(), src.device() == Device::cuda, src.nbytes());
}

Tensor to_host(const Tensor& t) {
  if (t.device() == Device::cpu) return t;
  Tensor host = Tensor::empty(t.shape(), t.dtype());
  copy_into(host, t);
  return host;
}

std::int64_t release_pages(float* data, std::int64_t count, Device device) {
  if (count <= 0) return 0;
  return device_ops(device).release_pages(data, static_cast<std::size_t>(count) * sizeof(float));
}

std::int64_t reserved_mapped_bytes(const void* data) { return gpu("CUDA reserved device memory").mapped_bytes(data); }

void commit_pages(float* data, std::int64_t count, Device device) {
  if (count > 0) device_ops(device).commit_pages(data, static_cast<std::size_t>(count) * sizeof(float));
}

}  // namespace ringtrain
