// The CPU convolution the builder makes (oneDNN's in a build with it) against Conv2d's own
// im2col + GEMM path: outputs and every gradient agree to rounding, for the CNN's shapes and for
// strides, padding, kernel sizes and batch sizes the CNN does not use, and repeat bit for bit,
// also while signals interrupt it (a stop signal may arrive mid-step).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "ringtrain/core/random.hpp"
#include "support/signal_storm.hpp"
#include "ringtrain/nn/layers.hpp"
#include "nn/layer_maker.hpp"
#include "unit/nn/bound_layer.hpp"

namespace ringtrain {
namespace {

using test::BoundLayer;
using test::LayerResult;
using test::run_layer;

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 0.0;
  for (const float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * scale + 1e-6) << what << "[" << i << "] of " << got.size();
}

TEST(CpuConv2d, MatchesTheOwnPathOnEveryShapeAndRepeatsBitForBit) {
  struct Case {
    std::int64_t c, h, w, out, kernel, stride, padding;
    bool bias;
  };
  const Case cases[] = {{1, 28, 28, 32, 3, 1, 1, true}, {32, 14, 14, 64, 3, 1, 1, true}, {3, 11, 13, 5, 5, 2, 2, true},
                        {4, 9, 7, 6, 1, 1, 0, false},   {2, 10, 10, 3, 3, 3, 0, true},   {5, 6, 6, 16, 3, 2, 1, false}};
  for (const Case& k : cases) {
    Conv2dOptions o;
    o.out_channels = k.out;
    o.kernel = k.kernel;
    o.stride = k.stride;
    o.padding = k.padding;
    o.bias = k.bias;
    const Shape in{k.c, k.h, k.w};
    BoundLayer own(std::make_unique<Conv2d>(o), in, 3), made(make_cpu_conv2d(o), in, 3);
    for (const std::int64_t n : {4, 1, 4}) {  // a second batch size, then the first again
      Tensor x = Tensor::empty(in.with_batch(n)), dy = Tensor::empty(own.out.with_batch(n));
      Rng rng(static_cast<std::uint64_t>(n * 100 + k.c));
      for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 2.0f * rng.uniform() - 1.0f;
      for (std::int64_t i = 0; i < dy.numel(); ++i) dy.f32()[i] = 2.0f * rng.uniform() - 1.0f;
      const LayerResult want = run_layer(own, x, dy), got = run_layer(made, x, dy), again = run_layer(made, x, dy);
      SCOPED_TRACE(testing::Message() << cpu_conv2d_library() << " c " << k.c << " kernel " << k.kernel << " stride "
                                      << k.stride << " padding " << k.padding << " batch " << n);
      expect_close(got.y, want.y, "y");
      expect_close(got.dx, want.dx, "dx");
      expect_close(got.grads, want.grads, "parameter gradients");
      EXPECT_EQ(std::memcmp(got.y.data(), again.y.data(), got.y.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(got.dx.data(), again.dx.data(), got.dx.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(got.grads.data(), again.grads.data(), got.grads.size() * sizeof(float)), 0);
    }
  }
}

// Slurm's SIGTERM before preemption, SIGUSR1, a profiler's SIGPROF: a handler runs on the
// computing thread, between any two instructions of a kernel. oneDNN 2.6's sgemm corrupts the
// heap when that happens (issue 21's notes); its convolutions must not.
TEST(CpuConv2d, GivesTheSameResultsWhileSignalsInterruptIt) {
  Conv2dOptions o;
  o.out_channels = 64;
  o.padding = 1;
  const Shape in{32, 14, 14};
  BoundLayer made(make_cpu_conv2d(o), in, 5);
  Tensor x = Tensor::empty(in.with_batch(8)), dy = Tensor::empty(made.out.with_batch(8));
  Rng rng(9);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 2.0f * rng.uniform() - 1.0f;
  for (std::int64_t i = 0; i < dy.numel(); ++i) dy.f32()[i] = 2.0f * rng.uniform() - 1.0f;
  const LayerResult first = run_layer(made, x, dy);
  int differing = 0;
  const int signals = test::with_signal_storm(std::chrono::microseconds(200), [&] {
    for (int i = 0; i < 100; ++i) {
      const LayerResult again = run_layer(made, x, dy);
      differing += again.y != first.y || again.dx != first.dx || again.grads != first.grads ? 1 : 0;
    }
  });
  EXPECT_EQ(differing, 0) << cpu_conv2d_library();
  EXPECT_GT(signals, 0);
}

}  // namespace
}  // namespace ringtrain
