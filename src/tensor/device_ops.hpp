// DeviceOps: the operations on raw memory of one device that tensors, tensor_ops, the gradient
// bucketer, the optimizers and the pruner need, whichever device holds the memory. device_ops()
// is the one place that chooses: Device::cpu gets the host's loops (HostOps, host_ops.hpp),
// Device::cuda the GPU backend (cuda/gpu_backend.hpp implements this interface with kernels on
// the compute stream). Callers pass the device their memory is on and compare no devices.
// Host-only header.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "ringtrain/core/device.hpp"
#include "ringtrain/tensor/dtype.hpp"

namespace ringtrain {

struct SgdHyper;
struct AdamWHyper;
struct ComputeCopyOut;

// Every allocation of a tensor starts on, and spans a multiple of, this many bytes (cudaMalloc's
// alignment, which ParamLayout's aligned offsets assume).
constexpr std::size_t kAllocationAlignment = 256;

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;

  // Memory. allocate_zeroed: `bytes` zeroed bytes, freed when the last owner lets go.
  // reserve_pages: the same from memory whose pages release_pages can hand back (whole pages or
  // granules inside [data, data + bytes); returns the bytes released; they read as zero on the
  // host, are unusable on the GPU until commit_pages maps them again). copy: `bytes` from src to
  // dst, both on this device. zero: `bytes` zero bytes at dst.
  virtual std::shared_ptr<void> allocate_zeroed(std::size_t bytes) const = 0;
  virtual std::shared_ptr<void> reserve_pages(std::size_t bytes) const = 0;
  virtual std::int64_t release_pages(void* data, std::size_t bytes) const = 0;
  virtual void commit_pages(void* data, std::size_t bytes) const = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) const = 0;
  virtual void zero(void* dst, std::size_t bytes) const = 0;

  // Element-wise over n elements (tensor_ops.hpp says what each computes); synchronize waits
  // until every queued operation of the device is done.
  virtual void add_into(void* dst, const void* src, std::int64_t n, DType dtype) const = 0;
  virtual void add_into_each(float* const* dsts, int count, const float* src, std::int64_t n) const = 0;
  virtual bool has_nonfinite(const float* x, std::int64_t n) const = 0;
  virtual double sum_of_squares(const float* x, std::int64_t n) const = 0;
  virtual void synchronize() const = 0;

  // The optimizer updates over n elements (update_rules.hpp's per-element rules) and the pruning
  // mask (x[i] = 0 where mask[i] == 0). device_scale: null, or a device f32 the gradients are
  // also scaled by, 0 skipping the update; copy: where the updated parameters also go in the
  // compute dtype (update_rules.hpp). Both are GPU-only: the host's updates refuse them.
  virtual void sgd_update(float* params, const float* grads, float* velocity, std::int64_t n, float grad_scale,
                          const float* device_scale, const ComputeCopyOut& copy, const SgdHyper& hyper) const = 0;
  virtual void adamw_update(float* params, const float* grads, float* m, float* v, std::int64_t n, float grad_scale,
                            const float* device_scale, const ComputeCopyOut& copy, const AdamWHyper& hyper) const = 0;
  virtual void apply_mask(float* x, const float* mask, std::int64_t n) const = 0;
};

// The operations of `device`: the host's, or the GPU backend's (Device::cuda in a build without
// CUDA: NotCompiled, "memory or operations on the GPU: this ringtrain was built without CUDA ...").
const DeviceOps& device_ops(Device device);

}  // namespace ringtrain
