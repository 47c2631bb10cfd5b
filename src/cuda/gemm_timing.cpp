// `bench gemm --backend cuda`: the operands of one GEMM on the current GPU, then every
// algorithm cuBLASLt offers for it timed by cuda::BlasLt::time_candidates, whose first
// candidate is the one ringtrain's gemm() uses.
#include <cuda_runtime.h>

#include "bench/bench_gemm_cuda.hpp"
#include "check/cuda_check.hpp"
#include "cuda/cuda_backend.hpp"
#include "nn/cuda/blaslt_gemm.hpp"
#include "nn/cuda/device_buffer.hpp"
#include "ringtrain/core/random.hpp"

namespace ringtrain {
namespace {

// `count` values uniform in [-1, 1) of `type` (f32, bf16 or f16) in a new device buffer.
cuda::DeviceBuffer random_operand(std::int64_t count, DType type, std::uint64_t key) {
  const auto n = static_cast<std::size_t>(count);
  cuda::DeviceBuffer buffer(n * dtype_size(type));
  Rng rng(stream_key(key, 0x67656d6d));
  if (type == DType::f32) {
    std::vector<float> host(n);
    for (float& v : host) v = 2.0f * rng.uniform() - 1.0f;
    RT_CUDA_CHECK(cudaMemcpy(buffer.get(), host.data(), buffer.bytes(), cudaMemcpyHostToDevice));
    return buffer;
  }
  RT_REQUIRE(type == DType::bf16 || type == DType::f16, Error, "bench gemm: no {} operands on CUDA (f32, bf16, f16)",
             dtype_name(type));
  std::vector<std::uint16_t> host(n);
  for (std::uint16_t& v : host) {
    const float x = 2.0f * rng.uniform() - 1.0f;
    v = type == DType::bf16 ? float_to_bf16(x) : float_to_f16(x);
  }
  RT_CUDA_CHECK(cudaMemcpy(buffer.get(), host.data(), buffer.bytes(), cudaMemcpyHostToDevice));
  return buffer;
}

}  // namespace

CudaGpu cuda::CudaBackend::current_gpu() const {
  CudaGpu gpu;
  RT_CUDA_CHECK(cudaGetDevice(&gpu.ordinal));
  cudaDeviceProp props{};
  RT_CUDA_CHECK(cudaGetDeviceProperties(&props, gpu.ordinal));
  gpu.name = props.name;
  return gpu;
}

std::vector<std::vector<double>> cuda::CudaBackend::time_gemm_candidates(const GemmProblem& p, int repeats,
                                                                         int calls) const {
  const GemmShape shape{p.trans_a, p.trans_b, p.m, p.n, p.k, p.trans_a ? p.m : p.k, p.trans_b ? p.k : p.n, p.n};
  const cuda::DeviceBuffer a = random_operand(p.m * p.k, p.ab_type, 1);
  const cuda::DeviceBuffer b = random_operand(p.k * p.n, p.ab_type, 2);
  const cuda::DeviceBuffer c(static_cast<std::size_t>(p.m * p.n) * dtype_size(p.c_type));
  cuda::BlasLt blas;
  const cuda::MathMode math = p.tf32 ? cuda::MathMode::tf32 : cuda::MathMode::strict_f32;
  std::vector<std::vector<double>> ms;
  ms.reserve(static_cast<std::size_t>(repeats));
  for (int r = 0; r < repeats; ++r)
    ms.push_back(blas.time_candidates(shape, a.get(), b.get(), c.get(), p.ab_type, p.c_type, math, nullptr, calls));
  return ms;
}

}  // namespace ringtrain
