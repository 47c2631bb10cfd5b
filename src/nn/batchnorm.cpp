// BatchNorm2d over [N, C, H, W]: batch statistics in training (biased variance to normalize,
// unbiased for the running estimate, as PyTorch), running statistics in evaluation.
// Statistics are per rank; the trainer averages the running buffers before evaluating.
#include <cmath>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain {

BatchNorm2d::BatchNorm2d(double momentum, double eps)
    : momentum_(static_cast<float>(momentum)), eps_(static_cast<float>(eps)) {
  RT_REQUIRE(momentum >= 0.0 && momentum <= 1.0, ConfigError, "batchnorm2d: momentum must be in [0, 1], got {}",
             momentum);
  RT_REQUIRE(eps > 0.0, ConfigError, "batchnorm2d: eps must be > 0, got {}", eps);
}

Shape BatchNorm2d::configure(const Shape& input) {
  RT_REQUIRE(input.rank() == 3, ConfigError, "batchnorm2d: input per sample must be [C, H, W], got {}", input.str());
  c_ = input[0];
  hw_ = input[1] * input[2];
  running_mean_ = Tensor::empty(Shape{c_});
  running_var_ = Tensor::empty(Shape{c_});
  for (std::int64_t i = 0; i < c_; ++i) running_var_.f32()[i] = 1.0f;
  return input;
}

std::vector<ParamSpec> BatchNorm2d::param_specs() const {
  return {{"weight", Shape{c_}, ParamInit::ones, 1}, {"bias", Shape{c_}, ParamInit::zeros, 1}};
}

void BatchNorm2d::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  gamma_ = params[0];
  beta_ = params[1];
  dgamma_ = grads[0];
  dbeta_ = grads[1];
}

void BatchNorm2d::forward(const Tensor& x, Tensor& y, const StepInfo& info) {
  const std::int64_t n = x.shape()[0], m = n * hw_;
  const float* in = x.f32();
  float* out = y.f32();
  const float* g = gamma_.f32();
  const float* b = beta_.f32();
  if (!info.training) {
    for (std::int64_t bi = 0; bi < n; ++bi)
      for (std::int64_t c = 0; c < c_; ++c) {
        const float inv = 1.0f / std::sqrt(running_var_.f32()[c] + eps_);
        const float mu = running_mean_.f32()[c];
        const float* src = in + (bi * c_ + c) * hw_;
        float* dst = out + (bi * c_ + c) * hw_;
        for (std::int64_t q = 0; q < hw_; ++q) dst[q] = (src[q] - mu) * inv * g[c] + b[c];
      }
    return;
  }
  mean_.assign(static_cast<std::size_t>(c_), 0.0f);
  inv_std_.assign(static_cast<std::size_t>(c_), 0.0f);
  xhat_.resize(static_cast<std::size_t>(n * c_ * hw_));
  for (std::int64_t c = 0; c < c_; ++c) {
    double s = 0.0, ss = 0.0;
    for (std::int64_t bi = 0; bi < n; ++bi) {
      const float* src = in + (bi * c_ + c) * hw_;
      for (std::int64_t q = 0; q < hw_; ++q) s += src[q];
    }
    const double mu = s / static_cast<double>(m);
    for (std::int64_t bi = 0; bi < n; ++bi) {
      const float* src = in + (bi * c_ + c) * hw_;
      for (std::int64_t q = 0; q < hw_; ++q) ss += (src[q] - mu) * (src[q] - mu);
    }
    const double var = ss / static_cast<double>(m);
    const float inv = static_cast<float>(1.0 / std::sqrt(var + eps_));
    mean_[static_cast<std::size_t>(c)] = static_cast<float>(mu);
    inv_std_[static_cast<std::size_t>(c)] = inv;
    const double unbiased = m > 1 ? ss / static_cast<double>(m - 1) : var;
    running_mean_.f32()[c] = (1 - momentum_) * running_mean_.f32()[c] + momentum_ * static_cast<float>(mu);
    running_var_.f32()[c] = (1 - momentum_) * running_var_.f32()[c] + momentum_ * static_cast<float>(unbiased);
    for (std::int64_t bi = 0; bi < n; ++bi) {
      const std::int64_t off = (bi * c_ + c) * hw_;
      for (std::int64_t q = 0; q < hw_; ++q) {
        const float xh = (in[off + q] - static_cast<float>(mu)) * inv;
        xhat_[static_cast<std::size_t>(off + q)] = xh;
        out[off + q] = xh * g[c] + b[c];
      }
    }
  }
}

void BatchNorm2d::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx) {
  const std::int64_t n = x.shape()[0], m = n * hw_;
  const float* gy = dy.f32();
  for (std::int64_t c = 0; c < c_; ++c) {
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    for (std::int64_t bi = 0; bi < n; ++bi) {
      const std::int64_t off = (bi * c_ + c) * hw_;
      for (std::int64_t q = 0; q < hw_; ++q) {
        sum_dy += gy[off + q];
        sum_dy_xhat += gy[off + q] * xhat_[static_cast<std::size_t>(off + q)];
      }
    }
    dgamma_.f32()[c] = static_cast<float>(sum_dy_xhat);
    dbeta_.f32()[c] = static_cast<float>(sum_dy);
    if (dx == nullptr) continue;
    // dx = gamma * inv_std / m * (m * dy - sum(dy) - xhat * sum(dy * xhat))
    const float k = gamma_.f32()[c] * inv_std_[static_cast<std::size_t>(c)] / static_cast<float>(m);
    const float mdy = static_cast<float>(sum_dy), mdx = static_cast<float>(sum_dy_xhat);
    float* d = dx->f32();
    for (std::int64_t bi = 0; bi < n; ++bi) {
      const std::int64_t off = (bi * c_ + c) * hw_;
      for (std::int64_t q = 0; q < hw_; ++q)
        d[off + q] = k * (static_cast<float>(m) * gy[off + q] - mdy - xhat_[static_cast<std::size_t>(off + q)] * mdx);
    }
  }
}

}  // namespace ringtrain
