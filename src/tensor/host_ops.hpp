// HostOps: the DeviceOps of Device::cpu, loops over host memory. host_ops.cpp implements the
// memory and element-wise operations (and device_ops()), host_optimizer_update.cpp the optimizer
// updates (compiled for the vectoriser). Private to src/tensor.
#pragma once
#include "tensor/device_ops.hpp"

namespace ringtrain {

class HostOps final : public DeviceOps {
 public:
  // Aligned to kAllocationAlignment; from 1 MiB up an anonymous mapping: zero pages the kernel
  // fills in on first touch, so memory never written (a gradient arena handed over to ZeRO
  // staging before backward) is never resident. A large one is therefore reservable already.
  std::shared_ptr<void> allocate_zeroed(std::size_t bytes) const override;
  std::shared_ptr<void> reserve_pages(std::size_t bytes) const override { return allocate_zeroed(bytes); }
  std::int64_t release_pages(void* data, std::size_t bytes) const override;
  void commit_pages(void*, std::size_t) const override {}  // a released page comes back when written
  void copy(void* dst, const void* src, std::size_t bytes) const override;
  void zero(void* dst, std::size_t bytes) const override;

  void add_into(void* dst, const void* src, std::int64_t n, DType dtype) const override;
  void add_into_each(float* const* dsts, int count, const float* src, std::int64_t n) const override;
  bool has_nonfinite(const float* x, std::int64_t n) const override;
  double sum_of_squares(const float* x, std::int64_t n) const override;
  void synchronize() const override {}

  void sgd_update(float* params, const float* grads, float* velocity, std::int64_t n, float grad_scale,
                  const float* device_scale, const ComputeCopyOut& copy, const SgdHyper& hyper) const override;
  void adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, float grad_scale,
                    const float* device_scale, const ComputeCopyOut& copy, const AdamWHyper& hyper) const override;
  void apply_mask(float* x, const float* mask, std::int64_t n) const override;
};

}  // namespace ringtrain
