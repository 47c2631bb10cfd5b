// Softmax cross-entropy, numerically stable (log-sum-exp with the max subtracted), mean over
// the local batch; the trainer averages over ranks, which equals the global mean because
// every rank has the same batch size. Rows vectorise (row_math.hpp's exp, sums and arg-max: at
// GPT-2's 50,257 classes the loss cost as much as the LM head's GEMM before) and go in pieces
// over the rank's compute threads (host_parallel).
#include <cmath>
#include <vector>

#include "ringtrain/nn/layers.hpp"
#include "nn/row_math.hpp"
#include "tensor/host_parallel.hpp"

namespace ringtrain {

namespace {

// One row of logits: its probabilities into p; returns its loss term, log(sum exp(z - max)) -
// (z[label] - max), and counts it correct when its first largest logit is the label's.
double softmax_row(const float* z, std::int64_t k, std::int32_t label, float* p, std::int64_t& correct) {
  const std::int64_t best = rowmath::max_index(z, k);
  if (best == label) ++correct;
  const float top = z[best];
  for (std::int64_t j = 0; j < k; ++j) p[j] = rowmath::exp(z[j] - top);
  const float sum = rowmath::sum(p, k);
  const float inv = 1.0f / sum;
  for (std::int64_t j = 0; j < k; ++j) p[j] *= inv;
  return std::log(static_cast<double>(sum)) - static_cast<double>(z[label] - top);
}

}  // namespace

double SoftmaxCrossEntropy::forward(const Tensor& logits, const std::int32_t* labels) {
  n_ = logits.shape()[0];
  k_ = logits.shape()[1];
  probs_.resize(static_cast<std::size_t>(n_ * k_));
  labels_.assign(labels, labels + n_);
  const std::int64_t per_piece = host_parallel::rows_per_piece(k_), pieces = (n_ + per_piece - 1) / per_piece;
  // Each piece's loss and count apart, added in piece order: the same on any number of threads.
  std::vector<double> piece_loss(static_cast<std::size_t>(pieces), 0.0);
  std::vector<std::int64_t> piece_correct(static_cast<std::size_t>(pieces), 0);
  const float* z = logits.f32();
  host_parallel::for_ranges(n_, per_piece, [&](std::int64_t first, std::int64_t last) {
    const auto piece = static_cast<std::size_t>(first / per_piece);
    for (std::int64_t i = first; i < last; ++i)
      piece_loss[piece] += softmax_row(z + i * k_, k_, labels[i], probs_.data() + i * k_, piece_correct[piece]);
  });
  double total = 0.0;
  correct_ = 0;
  for (std::size_t p = 0; p < piece_loss.size(); ++p) {
    total += piece_loss[p];
    correct_ += piece_correct[p];
  }
  return n_ > 0 ? total / static_cast<double>(n_) : 0.0;
}

void SoftmaxCrossEntropy::backward(Tensor& dlogits) const {
  float* d = dlogits.f32();
  const float inv_n = 1.0f / static_cast<float>(n_);
  host_parallel::for_ranges(n_, host_parallel::rows_per_piece(k_), [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t i = first; i < last; ++i) {
      const float* p = probs_.data() + i * k_;
      float* row = d + i * k_;
      for (std::int64_t j = 0; j < k_; ++j) row[j] = p[j] * inv_n;
      row[labels_[static_cast<std::size_t>(i)]] -= inv_n;
    }
  });
}

}  // namespace ringtrain
