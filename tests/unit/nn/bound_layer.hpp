// A layer with its own parameter and gradient storage (parameters uniform in [-1, 1) from a
// seed), random input tensors, and one forward and backward of it: what the tests that compare
// two runs of a layer (two implementations, two thread counts) share.
#pragma once
#include <algorithm>
#include <memory>
#include <vector>

#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain::test {

// Uniform in [-1, 1) from `seed`.
inline void fill_uniform(Tensor& t, std::uint64_t seed) {
  Rng rng(seed);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = 2.0f * rng.uniform() - 1.0f;
}

struct BoundLayer {
  std::unique_ptr<Layer> layer;
  Tensor params, grads;
  Shape out;

  BoundLayer(std::unique_ptr<Layer> l, const Shape& in, std::uint64_t seed) : layer(std::move(l)) {
    out = layer->configure(in);
    std::int64_t total = 0;
    for (const auto& s : layer->param_specs()) total += s.shape.numel();
    params = Tensor::empty(Shape{std::max<std::int64_t>(total, 1)});
    grads = Tensor::empty(Shape{std::max<std::int64_t>(total, 1)});
    std::vector<Tensor> p, g;
    std::int64_t off = 0;
    for (const auto& s : layer->param_specs()) {
      p.push_back(params.flat_slice(off, s.shape));
      g.push_back(grads.flat_slice(off, s.shape));
      off += s.shape.numel();
    }
    layer->bind(p, g);
    fill_uniform(params, seed);
  }
};

struct LayerResult {
  std::vector<float> y, dx, grads;
};

// One forward (training) and backward with dy; dx starts as 7s, so a backward that leaves
// elements unwritten shows.
inline LayerResult run_layer(BoundLayer& b, const Tensor& x, const Tensor& dy) {
  Tensor y = Tensor::empty(dy.shape()), dx = Tensor::empty(x.shape());
  std::fill(dx.f32(), dx.f32() + dx.numel(), 7.0f);
  b.layer->forward(x, y, StepInfo{});
  b.layer->backward(x, y, dy, &dx);
  return {{y.f32(), y.f32() + y.numel()},
          {dx.f32(), dx.f32() + dx.numel()},
          {b.grads.f32(), b.grads.f32() + b.grads.numel()}};
}

}  // namespace ringtrain::test
