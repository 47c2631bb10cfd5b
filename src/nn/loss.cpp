// Softmax cross-entropy, numerically stable (log-sum-exp with the max subtracted), mean over
// the local batch; the trainer averages over ranks, which equals the global mean because
// every rank has the same batch size.
#include <cmath>

#include "ringtrain/nn/layers.hpp"

namespace ringtrain {

double SoftmaxCrossEntropy::forward(const Tensor& logits, const std::int32_t* labels) {
  n_ = logits.shape()[0];
  k_ = logits.shape()[1];
  probs_.resize(static_cast<std::size_t>(n_ * k_));
  labels_.assign(labels, labels + n_);
  correct_ = 0;
  const float* z = logits.f32();
  double total = 0.0;
  for (std::int64_t i = 0; i < n_; ++i) {
    const float* row = z + i * k_;
    std::int64_t best = 0;
    for (std::int64_t j = 1; j < k_; ++j)
      if (row[j] > row[best]) best = j;
    if (best == labels[i]) ++correct_;
    double sum = 0.0;
    float* p = probs_.data() + i * k_;
    for (std::int64_t j = 0; j < k_; ++j) {
      p[j] = std::exp(row[j] - row[best]);
      sum += p[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (std::int64_t j = 0; j < k_; ++j) p[j] *= inv;
    total += std::log(sum) - (row[labels[i]] - row[best]);
  }
  return n_ > 0 ? total / static_cast<double>(n_) : 0.0;
}

void SoftmaxCrossEntropy::backward(Tensor& dlogits) const {
  float* d = dlogits.f32();
  const float inv_n = 1.0f / static_cast<float>(n_);
  for (std::int64_t i = 0; i < n_; ++i)
    for (std::int64_t j = 0; j < k_; ++j) {
      const float onehot = (j == labels_[static_cast<std::size_t>(i)]) ? 1.0f : 0.0f;
      d[i * k_ + j] = (probs_[static_cast<std::size_t>(i * k_ + j)] - onehot) * inv_n;
    }
}

}  // namespace ringtrain
