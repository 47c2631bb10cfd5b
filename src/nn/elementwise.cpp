// Shape-preserving layers without parameters: ReLU, Flatten (a copy: activations have their
// own buffers) and Dropout (inverted; masks keyed by seed, step, rank and layer so they do
// not depend on anything else).
#include <algorithm>
#include <cstring>
#include <typeinfo>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/nn/dropout_rule.hpp"
#include "ringtrain/nn/layers.hpp"
#include "tensor/host_parallel.hpp"

namespace ringtrain {

void ReLU::apply(const float* x, float* y, std::int64_t n) {
  // !(x <= 0): a NaN passes (as cuBLASLt's ReLU epilogue and PyTorch: a diverged step stays
  // visible in the loss), -0 becomes +0.
  for (std::int64_t i = 0; i < n; ++i) y[i] = !(x[i] <= 0.0f) ? x[i] : 0.0f;
}

void ReLU::apply_backward(const float* y, const float* dy, float* dx, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = dy[i];  // loaded either way: the select then vectorizes (a conditional load does not)
    dx[i] = y[i] > 0.0f ? gi : 0.0f;
  }
}

void ReLU::apply_on_threads(const float* x, float* y, std::int64_t n) {
  host_parallel::for_ranges(n, host_parallel::kElementGrain,
                            [&](std::int64_t begin, std::int64_t end) { apply(x + begin, y + begin, end - begin); });
}

void ReLU::apply_backward_on_threads(const float* y, const float* dy, float* dx, std::int64_t n) {
  host_parallel::for_ranges(n, host_parallel::kElementGrain, [&](std::int64_t begin, std::int64_t end) {
    apply_backward(y + begin, dy + begin, dx + begin, end - begin);
  });
}

bool ReLU::is_cpu_relu(const Layer& layer) { return typeid(layer) == typeid(ReLU); }

void ReLU::forward(const Tensor& x, Tensor& y, const StepInfo&) { apply_on_threads(x.f32(), y.f32(), x.numel()); }

void ReLU::backward(const Tensor&, const Tensor& y, const Tensor& dy, Tensor* dx) {
  if (dx != nullptr) apply_backward_on_threads(y.f32(), dy.f32(), dx->f32(), y.numel());
}

void Flatten::forward(const Tensor& x, Tensor& y, const StepInfo&) { std::memcpy(y.raw(), x.raw(), x.nbytes()); }

void Flatten::backward(const Tensor&, const Tensor&, const Tensor& dy, Tensor* dx) {
  if (dx != nullptr) std::memcpy(dx->raw(), dy.raw(), dy.nbytes());
}

Dropout::Dropout(double p, int layer_index) : p_(static_cast<float>(p)), layer_index_(layer_index) {
  RT_REQUIRE(p >= 0.0 && p < 1.0, ConfigError, "dropout: p must be in [0, 1), got {}", p);
}

void Dropout::forward(const Tensor& x, Tensor& y, const StepInfo& info) {
  const std::int64_t n = x.numel();
  const float* in = x.f32();
  float* out = y.f32();
  if (!info.training || p_ == 0.0f) {
    scale_.clear();
    std::memcpy(out, in, x.nbytes());
    return;
  }
  scale_.resize(static_cast<std::size_t>(n));
  const std::uint64_t key = dropout_key(info.seed, info.step, info.rank, layer_index_, info.micro_batch);
  const float keep = dropout_scale(p_);
  for (std::int64_t i = 0; i < n; ++i) {
    scale_[static_cast<std::size_t>(i)] = dropout_keep(dropout_uniform(key, i), p_) ? keep : 0.0f;
    out[i] = in[i] * scale_[static_cast<std::size_t>(i)];
  }
}

void Dropout::backward(const Tensor&, const Tensor&, const Tensor& dy, Tensor* dx) {
  if (dx == nullptr) return;
  const float* g = dy.f32();
  float* d = dx->f32();
  if (scale_.empty()) {
    std::memcpy(d, g, dy.nbytes());
    return;
  }
  const std::int64_t n = dy.numel();
  for (std::int64_t i = 0; i < n; ++i) d[i] = g[i] * scale_[static_cast<std::size_t>(i)];
}

}  // namespace ringtrain
