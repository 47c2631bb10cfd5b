// Model: arena layout, activation buffers and the forward/backward sweep over the layers,
// with the low-precision emulation (rounding after every layer) when the compute dtype is not
// f32 on the CPU. On the GPU the same sweep queues device work; nothing is rounded here.
#include "ringtrain/nn/model.hpp"

#include <cmath>
#include <cstring>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/tensor/rounding.hpp"

namespace ringtrain {

Model::Model(std::vector<std::unique_ptr<Layer>> layers, const Shape& input_shape, Device device)
    : layers_(std::move(layers)), input_shape_(input_shape), device_(device) {
  RT_REQUIRE(!layers_.empty(), ConfigError, "model: no layers");
  Shape shape = input_shape;
  std::int64_t total = 0;
  first_trainable_ = layers_.size();
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    try {
      shape = layers_[i]->configure(shape);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("model.layers[{}]: {}", i, e.what()));
    }
    shapes_.push_back(shape);
    specs_.push_back(layers_[i]->param_specs());
    std::int64_t count = 0;
    for (const auto& s : specs_.back()) count += s.shape.numel();
    layer_params_.push_back(count);
    layer_offset_.push_back(total);
    if (count > 0 && first_trainable_ == layers_.size()) first_trainable_ = i;
    total += count;
  }
  params_ = Tensor::empty(Shape{total}, DType::f32, device_);
  grads_ = Tensor::empty(Shape{total}, DType::f32, device_);
  bind_layers(params_);
}

void Model::bind_layers(const Tensor& params) {
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    std::vector<Tensor> p, g;
    for (const auto& s : specs_[i]) {
      p.push_back(params.flat_slice(offset, s.shape));
      g.push_back(grads_.flat_slice(offset, s.shape));
      offset += s.shape.numel();
    }
    layers_[i]->bind(p, g);
  }
}

void Model::set_compute_dtype(DType dtype) {
  RT_REQUIRE(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, Error,
             "model: compute dtype {} is not supported (f32, bf16, f16)", dtype_name(dtype));
  compute_dtype_ = dtype;
  if (dtype == DType::f32 || device_ == Device::cuda) {  // CUDA layers cast the master themselves
    compute_params_ = Tensor();
    input_storage_ = Tensor();
    bind_layers(params_);
  } else {
    compute_params_ = Tensor::empty(params_.shape());
    bind_layers(compute_params_);
    compute_stale_ = true;
  }
  acts_.clear();  // ensure_batch() re-creates the views (and the input buffer) at the next forward
  capacity_ = 0;
}

void Model::init_params(std::uint64_t seed) {
  constexpr std::uint64_t kInitStream = 0x1417'0000'0000'0000ull;
  // Drawn on the host either way, so a GPU model starts from the CPU model's parameters.
  Tensor host = device_ == Device::cpu ? params() : Tensor::empty(params_.shape());
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i)
    for (std::size_t j = 0; j < specs_[i].size(); ++j) {
      const auto& s = specs_[i][j];
      Rng rng(stream_key(seed, kInitStream, i, j));
      float* p = host.f32() + offset;
      const float bound = 1.0f / std::sqrt(static_cast<float>(s.fan_in));
      for (std::int64_t k = 0; k < s.shape.numel(); ++k) {
        switch (s.init) {
          case ParamInit::uniform_fan_in: p[k] = (2.0f * rng.uniform() - 1.0f) * bound; break;
          case ParamInit::ones: p[k] = 1.0f; break;
          case ParamInit::zeros: p[k] = 0.0f; break;
          case ParamInit::normal: p[k] = static_cast<float>(s.std * rng.normal()); break;
        }
      }
      offset += s.shape.numel();
    }
  if (device_ != Device::cpu) copy_into(params(), host);
}

void Model::ensure_batch(std::int64_t n) {
  if (n > capacity_) {
    act_storage_.clear();
    grad_storage_.clear();
    for (const auto& s : shapes_) {
      act_storage_.push_back(Tensor::empty(s.with_batch(n), activation_dtype(), device_));
      grad_storage_.push_back(Tensor::empty(s.with_batch(n), activation_dtype(), device_));
    }
    if (emulated()) input_storage_ = Tensor::empty(input_shape_.with_batch(n));
    capacity_ = n;
  }
  if (acts_.empty() || acts_[0].shape()[0] != n) {
    acts_.clear();
    dacts_.clear();
    for (std::size_t i = 0; i < shapes_.size(); ++i) {
      acts_.push_back(act_storage_[i].rows(0, n));
      dacts_.push_back(grad_storage_[i].rows(0, n));
    }
  }
}

const Tensor& Model::forward(const Tensor& x, const StepInfo& info) {
  RT_REQUIRE(x.shape().rank() >= 1 && x.shape().sample() == input_shape_, Error,
             "model input {} does not match the configured per-sample shape {}", x.shape().str(), input_shape_.str());
  RT_REQUIRE(x.device() == device_ && x.dtype() == activation_dtype(), Error,
             "model input is {} on the {}, the model computes in {} on the {}", dtype_name(x.dtype()),
             x.device() == Device::cuda ? "GPU" : "CPU", dtype_name(activation_dtype()),
             device_ == Device::cuda ? "GPU" : "CPU");
  const std::int64_t n = x.shape()[0];
  ensure_batch(n);
  prepare_compute(x);
  const Tensor* in = &input_;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->forward(*in, acts_[i], info);
    if (emulated()) round_in_place(acts_[i].f32(), acts_[i].numel(), compute_dtype_);
    in = &acts_[i];
  }
  return acts_.back();
}

void Model::prepare_compute(const Tensor& x) {
  if (!emulated()) {
    input_ = x;
    return;
  }
  if (compute_stale_) {
    std::memcpy(compute_params_.f32(), params_.f32(), params_.nbytes());
    round_in_place(compute_params_.f32(), compute_params_.numel(), compute_dtype_);
    compute_stale_ = false;
  }
  input_ = input_storage_.rows(0, x.shape()[0]);
  std::memcpy(input_.f32(), x.f32(), x.nbytes());
  round_in_place(input_.f32(), input_.numel(), compute_dtype_);
}

void Model::backward(const Tensor& dlogits, const GradReadyHook& on_ready) {
  const std::size_t last = layers_.size() - 1;
  RT_REQUIRE(dlogits.shape() == acts_[last].shape(), Error, "backward: gradient shape {} != output shape {}",
             dlogits.shape().str(), acts_[last].shape().str());
  // Layers before the first one with parameters need no backward at all, and that layer
  // needs no input gradient (for the MLP this skips a third of the first GEMM's backward).
  const Tensor* dy = &dlogits;
  for (std::size_t i = last + 1; i-- > first_trainable_;) {
    const Tensor& x = i == 0 ? input_ : acts_[i - 1];
    Tensor* dx = i == first_trainable_ ? nullptr : &dacts_[i - 1];
    layers_[i]->backward(x, acts_[i], *dy, dx);
    if (emulated()) {
      if (dx != nullptr) round_in_place(dx->f32(), dx->numel(), compute_dtype_);
      round_in_place(grads_.f32() + layer_offset_[i], layer_params_[i], compute_dtype_);
    }
    if (on_ready && layer_params_[i] > 0) on_ready(layer_offset_[i]);
    dy = dx;
  }
}

void Model::begin_step(const StepInfo& info) {
  for (const auto& layer : layers_) layer->begin_step(info);
}

std::vector<std::int64_t> Model::param_layer_offsets() const {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < layers_.size(); ++i)
    if (layer_params_[i] > 0) out.push_back(layer_offset_[i]);
  return out;
}

std::vector<Model::ParamTensor> Model::param_tensors() const {
  std::vector<ParamTensor> out;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    std::int64_t offset = layer_offset_[i];
    for (const auto& s : specs_[i]) {
      out.push_back({i, layers_[i]->kind(), s.name, s.shape, offset});
      offset += s.shape.numel();
    }
  }
  return out;
}

std::vector<Tensor> Model::buffers() {
  std::vector<Tensor> out;
  for (auto& l : layers_)
    for (auto& b : l->buffers()) out.push_back(b);
  return out;
}

std::int64_t Model::train_flops_per_sample() const {
  std::int64_t f = 0;
  for (const auto& l : layers_) f += l->forward_flops_per_sample();
  return 3 * f;
}

std::string Model::describe() const {
  std::string s;
  for (std::size_t i = 0; i < layers_.size(); ++i)
    s += fmt::format("  [{}] {:<12} -> {:<16} {:>10} params\n", i, layers_[i]->kind(), shapes_[i].str(),
                     layer_params_[i]);
  return s;
}

}  // namespace ringtrain
