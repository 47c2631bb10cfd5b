// The CPU layers whose own loops run on the rank's compute threads (host_parallel: attention's
// (sample, head) pairs, LayerNorm's rows, batch norm's channels, max-pool's samples, GELU, ReLU
// and the residual add's elements, the loss's rows) give bitwise the same outputs, input gradients and parameter
// gradients on one thread and on two, with shapes that make many pieces of each loop, enough
// work that both threads take some (LayerNorm's weight gradients and the loss are summed per
// piece; a shared sum or shared scratch fails these).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "ringtrain/nn/layers.hpp"
#include "tensor/blas.hpp"
#include "tensor/host_parallel.hpp"
#include "unit/nn/bound_layer.hpp"

namespace ringtrain {
namespace {

Tensor random_tensor(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  test::fill_uniform(t, seed);
  return t;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool bitwise_equal(const test::LayerResult& a, const test::LayerResult& b) {
  return bitwise_equal(a.y, b.y) && bitwise_equal(a.dx, b.dx) && bitwise_equal(a.grads, b.grads);
}

// A fresh layer from `make`, its parameters random, run once on `threads` compute threads.
template <typename Make>
test::LayerResult run_on(int threads, Make make, const Shape& sample, std::int64_t batch) {
  const int before = blas::threads();
  blas::set_threads(threads);
  test::BoundLayer bound(make(), sample, 3);
  const test::LayerResult result =
      test::run_layer(bound, random_tensor(sample.with_batch(batch), 1), random_tensor(bound.out.with_batch(batch), 2));
  blas::set_threads(before);
  return result;
}

class LayerThreads : public ::testing::Test {
 protected:
  void SetUp() override {
    blas::set_threads(2);
    const int two = host_parallel::workers(2);
    blas::set_threads(1);
    if (two < 2) GTEST_SKIP() << "this build runs the layers' loops on one thread (no oneDNN, so no OpenMP)";
  }
};

TEST_F(LayerThreads, LayerNormRowsAndWeightGradients) {
  // 4,096 rows of 256: 64 pieces of 64 rows, enough work that the second thread takes some.
  const auto make = [] { return std::make_unique<LayerNorm>(1e-5); };
  EXPECT_TRUE(bitwise_equal(run_on(2, make, Shape{512, 256}, 8), run_on(1, make, Shape{512, 256}, 8)));
}

TEST_F(LayerThreads, BatchNormChannels) {
  // 16 channels of 8 planes of 28 x 28: each channel is a piece with its own sums.
  const auto make = [] { return std::make_unique<BatchNorm2d>(0.1, 1e-5); };
  EXPECT_TRUE(bitwise_equal(run_on(2, make, Shape{16, 28, 28}, 8), run_on(1, make, Shape{16, 28, 28}, 8)));
}

TEST_F(LayerThreads, MaxPoolSamples) {
  for (const auto& [k, stride] : std::vector<std::pair<int, int>>{{2, 2}, {3, 2}}) {
    const auto make = [k = k, stride = stride] { return std::make_unique<MaxPool2d>(k, stride); };
    EXPECT_TRUE(bitwise_equal(run_on(2, make, Shape{16, 28, 28}, 8), run_on(1, make, Shape{16, 28, 28}, 8)))
        << "k " << k << " stride " << stride;
  }
}

TEST_F(LayerThreads, LinearBiasGradientColumns) {
  // 512 rows of 384 outputs: six pieces of 64 columns. Only the bias gradient is compared (a
  // column sum of dy, in row order); the GEMMs' own threading is oneDNN's.
  const auto make = [] { return std::make_unique<Linear>(384, true); };
  const test::LayerResult two = run_on(2, make, Shape{64, 256}, 8), one = run_on(1, make, Shape{64, 256}, 8);
  const std::vector<float> bias_two(two.grads.end() - 384, two.grads.end()),
      bias_one(one.grads.end() - 384, one.grads.end());
  EXPECT_TRUE(bitwise_equal(bias_two, bias_one));
}

TEST_F(LayerThreads, ReluElements) {
  const auto make = [] { return std::make_unique<ReLU>(); };
  EXPECT_TRUE(bitwise_equal(run_on(2, make, Shape{64, 1024}, 8), run_on(1, make, Shape{64, 1024}, 8)));
}

TEST_F(LayerThreads, GeluElements) {
  const auto make = [] { return std::make_unique<Gelu>(); };
  EXPECT_TRUE(bitwise_equal(run_on(2, make, Shape{300, 256}, 4), run_on(1, make, Shape{300, 256}, 4)));
}

TEST_F(LayerThreads, AttentionHeads) {
  if (!blas::sgemm_in_parallel_loops()) GTEST_SKIP() << "sgemm is OpenBLAS's here: attention's heads run in turn";
  // 4 samples x 4 heads, T = 130 (three row blocks, the last ragged).
  const auto make = [] { return std::make_unique<CausalSelfAttention>(4); };
  EXPECT_TRUE(bitwise_equal(run_on(2, make, Shape{130, 3 * 128}, 4), run_on(1, make, Shape{130, 3 * 128}, 4)));
}

TEST_F(LayerThreads, ResidualAdd) {
  const auto run = [](int threads) {
    const int before = blas::threads();
    blas::set_threads(threads);
    Add add;
    const Shape sample{300, 128};
    add.configure_many({sample, sample});
    const Tensor a = random_tensor(sample.with_batch(4), 1), b = random_tensor(sample.with_batch(4), 2);
    Tensor y = Tensor::empty(sample.with_batch(4));
    add.forward_many({&a, &b}, y, StepInfo{true, 0, 0, 0});
    blas::set_threads(before);
    return std::vector<float>(y.f32(), y.f32() + y.numel());
  };
  EXPECT_TRUE(bitwise_equal(run(2), run(1)));
}

TEST_F(LayerThreads, SoftmaxCrossEntropyRows) {
  // 512 rows of 1,000 classes: 32 pieces of 16 rows.
  const auto run = [](int threads) {
    const int before = blas::threads();
    blas::set_threads(threads);
    const std::int64_t n = 512, k = 1000;
    const Tensor z = random_tensor(Shape{n, k}, 4);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) labels[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i * 37 % k);
    SoftmaxCrossEntropy ce;
    const double loss = ce.forward(z, labels.data());
    Tensor dz = Tensor::empty(Shape{n, k});
    ce.backward(dz);
    blas::set_threads(before);
    std::vector<float> out(dz.f32(), dz.f32() + dz.numel());
    out.push_back(static_cast<float>(loss));
    out.push_back(static_cast<float>(ce.correct()));
    return std::make_pair(out, loss);
  };
  const auto one = run(1), two = run(2);
  EXPECT_TRUE(bitwise_equal(two.first, one.first));
  EXPECT_EQ(std::memcmp(&two.second, &one.second, sizeof(double)), 0) << two.second << " vs " << one.second;
}

}  // namespace
}  // namespace ringtrain
