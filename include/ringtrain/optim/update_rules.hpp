// Per-element update rules shared by the CPU optimizers and the CUDA kernels (kernels/), so
// the CPU path is literally the reference the GPU is tested against. Host-only header: the
// RT_HOST_DEVICE marker expands to __host__ __device__ only under nvcc.
#pragma once
#include <cmath>

#include "ringtrain/tensor/dtype.hpp"

#ifdef __CUDACC__
#define RT_HOST_DEVICE __host__ __device__
#else
#define RT_HOST_DEVICE
#endif

namespace ringtrain {

struct SgdHyper {
  float lr = 0.01f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;  // L2, added to the gradient (PyTorch SGD semantics)
  bool nesterov = false;
};

// PyTorch semantics (dampening 0): g' = g + wd p; v = mu v + g'; p -= lr (nesterov ? g' + mu v : v).
RT_HOST_DEVICE inline void sgd_update(float& p, float g, float& v, const SgdHyper& h) {
  g += h.weight_decay * p;
  if (h.momentum != 0.0f) {
    v = h.momentum * v + g;
    g = h.nesterov ? g + h.momentum * v : v;
  }
  p -= h.lr * g;
}

// Where a GPU update also writes each updated parameter rounded to the compute dtype (bf16 or
// f16), element i at data[i]: the model's compute copy kept current without a cast pass of its
// own. data null: none.
struct ComputeCopyOut {
  void* data = nullptr;
  DType dtype = DType::f32;
};

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;     // decoupled
  float bias_correction1 = 1.0f;  // 1 - beta1^t
  float bias_correction2 = 1.0f;  // 1 - beta2^t
};

RT_HOST_DEVICE inline void adamw_update(float& p, float g, float& m, float& v, const AdamWHyper& h) {
  p -= h.lr * h.weight_decay * p;
  m = h.beta1 * m + (1.0f - h.beta1) * g;
  v = h.beta2 * v + (1.0f - h.beta2) * g * g;
  const float m_hat = m / h.bias_correction1;
  const float v_hat = v / h.bias_correction2;
  p -= h.lr * m_hat / (sqrtf(v_hat) + h.eps);
}

}  // namespace ringtrain
