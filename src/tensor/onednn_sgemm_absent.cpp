// oneDNN's sgemm in a build without oneDNN: there is none, and OpenBLAS serves every sgemm.
#include "ringtrain/core/error.hpp"
#include "tensor/onednn_sgemm.hpp"

namespace ringtrain::blas::onednn {

bool compiled() { return false; }
bool avx512_here() { return false; }
std::string description() { return "not compiled"; }

void use_threads(int /*threads*/) {}
void generate_kernels(int /*threads*/) {}

void sgemm(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t, const float*,
           std::int64_t, float, float*, std::int64_t, int) {
  throw NotCompiled("oneDNN's sgemm: this ringtrain was built without oneDNN (RINGTRAIN_WITH_ONEDNN=OFF)");
}

}  // namespace ringtrain::blas::onednn
