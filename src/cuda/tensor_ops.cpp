// tensor_ops on the GPU: the accumulate, zeroing and overflow-check kernels on the compute stream.
#include <cuda_runtime.h>

#include "cuda/compute_stream.hpp"
#include "check/cuda_check.hpp"
#include "kernels/scaler_kernels.hpp"
#include "cuda/cuda_backend.hpp"
#include "kernels/tensor_kernels.hpp"

namespace ringtrain::cuda {

void CudaBackend::add_into(void* dst, const void* src, std::int64_t n, DType dtype) const {
  kernels::launch_add(dst, dst, src, n, dtype, compute_stream());
}

void CudaBackend::zero(void* dst, std::size_t bytes) const {
  if (bytes > 0) RT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, compute_stream()));
}

void CudaBackend::add_into_each(float* const* dsts, int count, const float* src, std::int64_t n) const {
  kernels::launch_accumulate_each(dsts, count, src, n, compute_stream());
}

void CudaBackend::cast(void* dst, DType to, const void* src, DType from, std::int64_t n) const {
  kernels::launch_cast(src, from, dst, to, n, compute_stream());
}

bool CudaBackend::has_nonfinite(const float* x, std::int64_t n) const {
  // One flag word per process, reused: the check runs once per step on the compute stream.
  static std::int32_t* flag = [] {
    std::int32_t* p = nullptr;
    RT_CUDA_CHECK(cudaMalloc(&p, sizeof(std::int32_t)));
    return p;
  }();
  RT_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(std::int32_t), compute_stream()));
  kernels::launch_find_nonfinite(x, n, flag, compute_stream());
  std::int32_t found = 0;
  RT_CUDA_CHECK(cudaMemcpy(&found, flag, sizeof(found), cudaMemcpyDeviceToHost));
  return found != 0;
}

double CudaBackend::sum_of_squares(const float* x, std::int64_t n) const {
  // Scratch per process, reused: the partial sums and the result, on the compute stream.
  static double* scratch = [] {
    double* p = nullptr;
    RT_CUDA_CHECK(cudaMalloc(&p, (kernels::kSumSquaresBlocks + 1) * sizeof(double)));
    return p;
  }();
  kernels::launch_sum_squares(x, n, scratch, scratch + kernels::kSumSquaresBlocks, compute_stream());
  double sum = 0.0;
  RT_CUDA_CHECK(cudaMemcpy(&sum, scratch + kernels::kSumSquaresBlocks, sizeof(sum), cudaMemcpyDeviceToHost));
  return sum;
}

void CudaBackend::synchronize() const { RT_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace ringtrain::cuda
