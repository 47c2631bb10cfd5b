// Add: the residual addition y = a + b of two values of the same shape; backward hands dy to
// both (the model sums it into values that other layers read too). An absorbed ReLU is applied
// as the sum is written.
#include <cstring>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"
#include "tensor/host_parallel.hpp"

namespace ringtrain {

Shape Add::configure(const Shape&) { throw Error("add: reads two inputs (model.layers[].inputs)"); }

Shape Add::configure_many(const std::vector<Shape>& inputs) {
  RT_REQUIRE(inputs.size() == 2 && inputs[0] == inputs[1], ConfigError,
             "add: its two inputs must have the same shape, got {} and {}", inputs.at(0).str(), inputs.back().str());
  return inputs[0];
}

void Add::forward(const Tensor&, Tensor&, const StepInfo&) { throw Error("add: reads two inputs"); }

void Add::backward(const Tensor&, const Tensor&, const Tensor&, Tensor*) { throw Error("add: reads two inputs"); }

void Add::forward_many(const std::vector<const Tensor*>& x, Tensor& y, const StepInfo&) {
  const float* a = x[0]->f32();
  const float* b = x[1]->f32();
  float* out = y.f32();
  host_parallel::for_ranges(y.numel(), host_parallel::kElementGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
    if (relu_after_) ReLU::apply(out + begin, out + begin, end - begin);
  });
}

bool Add::absorb_consumer(const Layer& consumer) {
  relu_after_ = ReLU::is_cpu_relu(consumer);
  return relu_after_;
}

void Add::backward_many(const std::vector<const Tensor*>&, const Tensor& y, const Tensor& dy,
                        const std::vector<Tensor*>& dx) {
  // With a ReLU absorbed its rule goes to dy in place: the model reads dy no more.
  if (relu_after_) ReLU::apply_backward_on_threads(y.f32(), dy.f32(), dy.f32(), dy.numel());
  for (Tensor* d : dx)
    if (d != nullptr) std::memcpy(d->f32(), dy.f32(), dy.nbytes());
}

}  // namespace ringtrain
