// Device memory behind Tensor: the process's caching pool on the current CUDA device and
// copies between host and device. Host-only header; without CUDA every call throws NotCompiled.
#pragma once
#include <cstddef>
#include <memory>

#include "ringtrain/tensor/memory_pool.hpp"

namespace ringtrain {

// The pool for the device current at first use (the rank's bound GPU). Lives until exit:
// tensors may be released after main returns, when tearing down the pool would be unsafe.
MemoryPool& cuda_pool();

// `bytes` zeroed bytes from cuda_pool(), returned to it when the last owner lets go.
std::shared_ptr<void> allocate_cuda_zeroed(std::size_t bytes);

// cudaMemcpy between host and device memory (either side may be either); ordered on the
// default stream; a copy to host memory returns when the bytes are there.
void copy_cuda_bytes(void* dst, bool dst_on_device, const void* src, bool src_on_device, std::size_t bytes);

}  // namespace ringtrain
