// BatchNorm2d over [N, C, H, W]: batch statistics in training (biased variance to normalize,
// unbiased for the running estimate, as PyTorch), running statistics in evaluation.
// Statistics are per rank; the trainer averages the running buffers before evaluating.
// Each channel is one piece of work on the rank's compute threads (its own sums, in a fixed
// order: the same results on any number of threads). A channel's N planes are summed in float
// lanes within a plane and in double across planes; backward recomputes x-hat from x rather than
// keeping a copy of it. An absorbed ReLU is applied as the output is written.
#include <cmath>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"
#include "nn/row_math.hpp"
#include "tensor/host_parallel.hpp"

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

bool BatchNorm2d::absorb_consumer(const Layer& consumer) {
  relu_after_ = ReLU::is_cpu_relu(consumer);
  return relu_after_;
}

void BatchNorm2d::forward(const Tensor& x, Tensor& y, const StepInfo& info) {
  const std::int64_t n = x.shape()[0], m = n * hw_, plane_stride = c_ * hw_;
  if (m == 0) return;  // no batch statistics to take (and no output to write)
  RT_REQUIRE(!info.training || m > 1, ConfigError,
             "batchnorm2d: one value per channel in training (a batch of 1 over 1 x 1 planes) has no batch "
             "statistics");
  const float* in = x.f32();
  float* out = y.f32();
  const float* g = gamma_.f32();
  const float* b = beta_.f32();
  float* running_mean = running_mean_.f32();
  float* running_var = running_var_.f32();
  if (info.training) {
    mean_.resize(static_cast<std::size_t>(c_));
    inv_std_.resize(static_cast<std::size_t>(c_));
  }
  host_parallel::for_each(c_, [&](std::int64_t c, int) {
    const float* src = in + c * hw_;
    float mean = running_mean[c];
    float inv = 1.0f / std::sqrt(running_var[c] + eps_);
    if (info.training) {
      double s = 0.0;
      for (std::int64_t bi = 0; bi < n; ++bi) s += rowmath::sum(src + bi * plane_stride, hw_);
      mean = static_cast<float>(s / static_cast<double>(m));
      double ss = 0.0;
      for (std::int64_t bi = 0; bi < n; ++bi) ss += rowmath::centered_sq_sum(src + bi * plane_stride, mean, hw_);
      const double var = ss / static_cast<double>(m);
      inv = static_cast<float>(1.0 / std::sqrt(var + eps_));
      mean_[static_cast<std::size_t>(c)] = mean;
      inv_std_[static_cast<std::size_t>(c)] = inv;
      const double unbiased = m > 1 ? ss / static_cast<double>(m - 1) : var;
      running_mean[c] = (1 - momentum_) * running_mean[c] + momentum_ * mean;
      running_var[c] = (1 - momentum_) * running_var[c] + momentum_ * static_cast<float>(unbiased);
    }
    const float scale = inv * g[c], shift = b[c];
    for (std::int64_t bi = 0; bi < n; ++bi) {
      const float* plane = src + bi * plane_stride;
      float* dst = out + c * hw_ + bi * plane_stride;
      for (std::int64_t q = 0; q < hw_; ++q) dst[q] = (plane[q] - mean) * scale + shift;
      if (relu_after_) ReLU::apply(dst, dst, hw_);
    }
  });
}

void BatchNorm2d::backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) {
  const std::int64_t n = x.shape()[0], m = n * hw_, plane_stride = c_ * hw_;
  float* gy = dy.f32();  // with a ReLU absorbed, its rule is applied here in place (the model reads dy no more)
  const float* in = x.f32();
  const float* out = y.f32();
  host_parallel::for_each(c_, [&](std::int64_t c, int) {
    const float mean = m > 0 ? mean_[static_cast<std::size_t>(c)] : 0.0f;
    const float inv = m > 0 ? inv_std_[static_cast<std::size_t>(c)] : 0.0f;
    double sum_dy = 0.0, sum_dy_centered = 0.0;
    for (std::int64_t bi = 0; bi < n; ++bi) {
      const std::int64_t off = c * hw_ + bi * plane_stride;
      if (relu_after_) ReLU::apply_backward(out + off, gy + off, gy + off, hw_);
      sum_dy += rowmath::sum(gy + off, hw_);
      sum_dy_centered += rowmath::centered_dot(gy + off, in + off, mean, hw_);
    }
    const double sum_dy_xhat = sum_dy_centered * inv;
    dgamma_.f32()[c] = static_cast<float>(sum_dy_xhat);
    dbeta_.f32()[c] = static_cast<float>(sum_dy);
    if (dx == nullptr) return;
    // dx = gamma * inv_std / m * (m * dy - sum(dy) - xhat * sum(dy * xhat))
    const float k = gamma_.f32()[c] * inv / static_cast<float>(m);
    const float fm = static_cast<float>(m), mdy = static_cast<float>(sum_dy), mdx = static_cast<float>(sum_dy_xhat);
    float* d = dx->f32();
    for (std::int64_t bi = 0; bi < n; ++bi) {
      const std::int64_t off = c * hw_ + bi * plane_stride;
      for (std::int64_t q = 0; q < hw_; ++q)
        d[off + q] = k * (fm * gy[off + q] - mdy - ((in[off + q] - mean) * inv) * mdx);
    }
  });
}

}  // namespace ringtrain
