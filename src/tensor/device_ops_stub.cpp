// tensor_ops' device side in a build without CUDA: says so clearly.
#include "ringtrain/core/error.hpp"
#include "tensor/device_ops.hpp"

namespace ringtrain {
namespace {
[[noreturn]] void not_compiled() {
  throw NotCompiled("tensor operation on the GPU: this ringtrain was built without CUDA (RINGTRAIN_WITH_CUDA=OFF)");
}
}  // namespace

void device_add_into(float*, const float*, std::int64_t) { not_compiled(); }
void device_add_into_each(float* const*, int, const float*, std::int64_t) { not_compiled(); }
bool device_has_nonfinite(const float*, std::int64_t) { not_compiled(); }
double device_sum_of_squares(const float*, std::int64_t) { not_compiled(); }
void device_synchronize() { not_compiled(); }

}  // namespace ringtrain
