// `bench gemm --backend cuda` in a build without CUDA: say so clearly.
#include "cli/bench_gemm_cuda.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {

std::vector<std::vector<double>> time_gemm_candidates_cuda(const GemmProblem&, int, int) {
  throw NotCompiled("bench gemm --backend cuda: this ringtrain was built without CUDA (RINGTRAIN_WITH_CUDA=OFF)");
}

}  // namespace ringtrain
