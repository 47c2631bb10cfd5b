// `bench gemm --backend cuda` in a build without CUDA: say so clearly.
#include "bench/bench_gemm_cuda.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {
constexpr const char* kNotCompiled =
    "bench gemm --backend cuda: this ringtrain was built without CUDA (RINGTRAIN_WITH_CUDA=OFF)";
}  // namespace

CudaGpu current_gpu_cuda() { throw NotCompiled(kNotCompiled); }

std::vector<std::vector<double>> time_gemm_candidates_cuda(const GemmProblem&, int, int) {
  throw NotCompiled(kNotCompiled);
}

}  // namespace ringtrain
