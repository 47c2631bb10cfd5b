// Linear: y = x W^T + b with W [out, in] over the last dimension; three GEMMs per step
// (forward, dW, dx), over N rows for [N, in] and N*T rows for [N, T, in]. A tied weight's dW
// (an LM head's) is left to param_grad_rows: the same GEMM for a block of output rows. A ReLU
// reading only its output is done in place on that output (and on its gradient in backward).
// The bias's broadcast and gradient and the ReLU run on the rank's compute threads.
#include <algorithm>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"
#include "tensor/blas.hpp"
#include "tensor/host_parallel.hpp"

namespace ringtrain {
namespace {
// Columns of the bias gradient per piece of work, at least: 64 floats, a few cache lines of each
// row (more where there are few rows, so a piece is about host_parallel::kElementGrain elements).
constexpr std::int64_t kBiasGradColumns = 64;
}  // namespace

Linear::Linear(std::int64_t out_features, bool bias, double init_std)
    : out_(out_features), has_bias_(bias), init_std_(init_std) {
  RT_REQUIRE(out_ > 0, ConfigError, "linear: out must be > 0, got {}", out_);
}

Shape Linear::configure(const Shape& input) {
  RT_REQUIRE(input.rank() == 1 || input.rank() == 2, ConfigError,
             "linear: input per sample is {}; add a flatten layer before it", input.str());
  if (input.rank() == 1) {
    seq_ = 1;
    in_ = input[0];
    return Shape{out_};
  }
  seq_ = input[0];
  in_ = input[1];
  return Shape{seq_, out_};
}

std::vector<ParamSpec> Linear::param_specs() const {
  if (init_std_ > 0.0) {  // GPT-2's: normal weights, zero bias
    std::vector<ParamSpec> specs{{"weight", Shape{out_, in_}, ParamInit::normal, in_, init_std_}};
    if (has_bias_) specs.push_back({"bias", Shape{out_}, ParamInit::zeros, in_});
    return specs;
  }
  std::vector<ParamSpec> specs{{"weight", Shape{out_, in_}, ParamInit::uniform_fan_in, in_}};
  if (has_bias_) specs.push_back({"bias", Shape{out_}, ParamInit::uniform_fan_in, in_});
  return specs;
}

void Linear::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  w_ = params[0];
  dw_ = grads[0];
  if (has_bias_) {
    b_ = params[1];
    db_ = grads[1];
  }
}

void Linear::forward(const Tensor& x, Tensor& y, const StepInfo&) {
  const std::int64_t n = rows_of(x);
  float* out = y.f32();
  if (has_bias_) {
    const float* b = b_.f32();
    host_parallel::for_ranges(n, host_parallel::rows_per_piece(out_), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) std::copy(b, b + out_, out + i * out_);
    });
  }
  blas::sgemm(false, true, n, out_, in_, 1.0f, x.f32(), in_, w_.f32(), in_, has_bias_ ? 1.0f : 0.0f, out, out_);
  if (relu_after_) ReLU::apply_on_threads(out, out, y.numel());
}

bool Linear::absorb_consumer(const Layer& consumer) {
  relu_after_ = ReLU::is_cpu_relu(consumer);
  return relu_after_;
}

void Linear::backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) {
  const std::int64_t n = rows_of(x);
  // With a ReLU absorbed, dy is its output's gradient: the ReLU's rule makes it the GEMMs' in
  // place (the model reads dy no more, Layer::absorb_consumer).
  if (relu_after_) ReLU::apply_backward_on_threads(y.f32(), dy.f32(), dy.f32(), y.numel());
  const float* g = dy.f32();
  if (defer_dw_) {
    saved_x_ = x;
    saved_dy_ = dy;
  } else {
    blas::sgemm(true, false, out_, in_, n, 1.0f, g, out_, x.f32(), in_, 0.0f, dw_.f32(), in_);
  }
  if (has_bias_) {  // each column's sum over the rows in order, whichever thread takes its columns
    float* db = db_.f32();
    const std::int64_t columns =
        std::max(kBiasGradColumns, host_parallel::kElementGrain / std::max<std::int64_t>(n, 1));
    host_parallel::for_ranges(out_, columns, [&](std::int64_t j0, std::int64_t j1) {
      std::fill(db + j0, db + j1, 0.0f);
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = j0; j < j1; ++j) db[j] += g[i * out_ + j];
    });
  }
  if (dx != nullptr) blas::sgemm(false, false, n, in_, out_, 1.0f, g, out_, w_.f32(), in_, 0.0f, dx->f32(), in_);
}

void Linear::defer_param_grad(std::size_t param) {
  RT_REQUIRE(param == 0, Error, "linear: only the weight's gradient can be deferred");
  defer_dw_ = true;
}

void Linear::param_grad_rows(std::size_t param, std::int64_t r0, std::int64_t r1, float* out, bool add) const {
  RT_REQUIRE(param == 0 && defer_dw_ && 0 <= r0 && r0 <= r1 && r1 <= out_, Error,
             "linear: weight gradient rows [{}, {}) of {} asked for without a deferred gradient", r0, r1, out_);
  const std::int64_t n = rows_of(saved_x_);
  blas::sgemm(true, false, r1 - r0, in_, n, 1.0f, saved_dy_.f32() + r0, out_, saved_x_.f32(), in_, add ? 1.0f : 0.0f,
              out, in_);
}

}  // namespace ringtrain
