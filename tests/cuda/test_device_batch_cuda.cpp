// Augmentation on the GPU in the input path: DeviceBatch's raw upload (uint8 + draws, augmented
// and normalized on the device) gives bit for bit what the host path's upload of the same batch
// decoded by data::SampleDecoder gives, in every activation dtype and across reused staging
// buffers; a batch staged ahead keeps its values and the model's input address; and training
// steps on raw batches equal steps on host-decoded ones. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda_test_models.hpp"
#include "cuda/cuda_test_support.hpp"
#include "data/sample_decoder.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/train/data_parallel_step.hpp"
#include "train/device_batch.hpp"

namespace ringtrain {
namespace {

using test::bind_gpu;
using test::kCnn;

const Shape kSample{3, 7, 9};
const GpuAugment kAugment{Normalization{{0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616}}, 2};
constexpr std::int64_t kMaxRows = 8;

// A loader-like batch of n random uint8 samples with crop and flip draws, in both forms: raw
// (Batch::raw, Batch::draws) and decoded on the host (Batch::x), as the Loader makes them.
struct BothForms {
  Batch raw, decoded;
};

BothForms make_batch(std::int64_t n, std::uint64_t seed, const Shape& sample) {
  BothForms b;
  const std::int64_t numel = sample.numel();
  b.raw.raw = Tensor::empty(sample.with_batch(n), DType::u8);
  b.decoded.x = Tensor::empty(sample.with_batch(n));
  Rng rng(stream_key(seed));
  for (std::int64_t i = 0; i < b.raw.raw.numel(); ++i)
    b.raw.raw.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(rng.next() >> 56);
  const data::SampleDecoder decoder(SampleType::u8, sample, kAugment.normalize, kAugment.crop_padding);
  for (std::int64_t s = 0; s < n; ++s) {
    b.raw.draws.push_back(draw_augment(AugmentOptions{kAugment.crop_padding, true}, seed, 3, s));
    decoder.decode(b.raw.raw.data<std::byte>() + s * numel, b.raw.draws.back(), b.decoded.x.f32() + s * numel);
    b.raw.labels.push_back(static_cast<std::int32_t>((s * 7 + static_cast<std::int64_t>(seed)) % 10));
  }
  b.decoded.labels = b.raw.labels;
  return b;
}

std::vector<std::byte> bytes_of(const Tensor& device) {
  const Tensor host = to_host(device);
  const auto* p = static_cast<const std::byte*>(host.raw());
  return std::vector<std::byte>(p, p + host.nbytes());
}

TEST(CudaDeviceBatch, RawUploadEqualsTheHostPathBitwise) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  for (const DType act : test::kFloatDTypes) {
    SCOPED_TRACE(dtype_name(act));
    auto host_path = make_device_batch(Device::cuda, kMaxRows, kSample, act, 1);
    auto gpu_path = make_device_batch(Device::cuda, kMaxRows, kSample, act, 1, &kAugment);
    // Batches of changing size through the same staging buffers; some flips and crops in each.
    for (const auto& [n, seed] : {std::pair<std::int64_t, std::uint64_t>{6, 1}, {8, 2}, {1, 3}, {8, 4}}) {
      SCOPED_TRACE("n " + std::to_string(n));
      const BothForms b = make_batch(n, seed, kSample);
      const PlacedBatch want = host_path->upload(b.decoded.x, b.decoded.labels.data());
      const PlacedBatch got = gpu_path->upload_raw(b.raw.raw, b.raw.draws.data(), b.raw.labels.data());
      CUDA_OK(cudaDeviceSynchronize());
      ASSERT_TRUE(got.x.shape() == want.x.shape()) << got.x.shape().str();
      EXPECT_EQ(got.x.dtype(), act);
      EXPECT_EQ(got.x.device(), Device::cuda);
      EXPECT_EQ(bytes_of(got.x), bytes_of(want.x));
      std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
      CUDA_OK(cudaMemcpy(labels.data(), got.labels, labels.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost));
      EXPECT_EQ(labels, b.raw.labels);
      // The f32 upload of the same batch still works on the augmenting DeviceBatch.
      EXPECT_EQ(bytes_of(gpu_path->upload(b.decoded.x, b.decoded.labels.data()).x), bytes_of(want.x));
    }
  }
}

// Two landing buffers in turn, one buffer the model reads: a batch staged while the placed one
// is still in use (overwriting the host batch right after stage, as the loader may) is placed
// later with its own values, at the same device address (a CUDA graph keeps that address).
TEST(CudaDeviceBatch, StagedAheadBatchesKeepTheirValuesAtOneAddress) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  auto placer = make_device_batch(Device::cuda, kMaxRows, kSample, DType::f32, 1);
  const BothForms a = make_batch(8, 11, kSample), b = make_batch(5, 12, kSample);
  const PlacedBatch first = placer->upload(a.decoded.x, a.decoded.labels.data());
  const std::vector<std::byte> first_bytes = bytes_of(first.x);
  EXPECT_EQ(first_bytes, bytes_of(a.decoded.x));
  Tensor reused = Tensor::empty(b.decoded.x.shape());
  std::memcpy(reused.raw(), b.decoded.x.raw(), static_cast<std::size_t>(b.decoded.x.nbytes()));
  placer->stage(reused, b.decoded.labels.data());
  std::memset(reused.raw(), 0xff, static_cast<std::size_t>(reused.nbytes()));  // the host buffer's next use
  EXPECT_EQ(bytes_of(first.x), first_bytes) << "staging must not touch the placed batch";
  const PlacedBatch second = placer->place();
  EXPECT_EQ(second.x.raw(), first.x.raw());
  EXPECT_EQ(second.labels, first.labels);
  EXPECT_EQ(bytes_of(second.x), bytes_of(b.decoded.x));
  std::vector<std::int32_t> labels(5);
  CUDA_OK(cudaMemcpy(labels.data(), second.labels, labels.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost));
  EXPECT_EQ(labels, b.decoded.labels);
}

TEST(CudaDeviceBatch, RawUploadNeedsGpuAugmentation) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  auto plain = make_device_batch(Device::cuda, kMaxRows, kSample, DType::f32, 1);
  const BothForms b = make_batch(2, 5, kSample);
  test::expect_error_naming([&] { plain->upload_raw(b.raw.raw, b.raw.draws.data(), b.raw.labels.data()); },
                            "without GPU augmentation");
}

// Parameters after a few SGD steps on raw batches (augmented on the GPU) or host-decoded ones.
std::vector<float> train(DType precision, bool raw) {
  Config c = Config::parse(kCnn, "test.toml");
  auto model = build_model(c, kSample, ComputeOptions{Device::cuda, precision, false});
  model->init_params(7);
  Sgd sgd(model->arena_elements(), SgdHyper{}, Device::cuda);
  auto stats = make_mpi_self_communicator(AllreduceAlgo::ring);
  auto grads = make_mpi_self_communicator(AllreduceAlgo::ring);
  StepOptions options;
  if (raw) options.gpu_augment = kAugment;
  DataParallelStep step(*model, sgd, *stats, *grads, kMaxRows, options, nullptr);
  for (std::int64_t s = 0; s < 4; ++s) {
    const BothForms b = make_batch(kMaxRows, 10 + static_cast<std::uint64_t>(s), kSample);
    step.run(raw ? b.raw : b.decoded, StepInfo{true, 1, s, 0}, 0.05f);
  }
  const Tensor host = to_host(model->params());
  return std::vector<float>(host.f32(), host.f32() + host.numel());
}

TEST(CudaDeviceBatch, StepsOnRawBatchesEqualStepsOnDecodedOnes) {
  if (!bind_gpu()) GTEST_SKIP() << "no CUDA device";
  for (const DType precision : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(precision));
    const std::vector<float> decoded = train(precision, false), raw = train(precision, true);
    ASSERT_EQ(raw.size(), decoded.size());
    EXPECT_EQ(std::memcmp(raw.data(), decoded.data(), raw.size() * sizeof(float)), 0);
  }
}

}  // namespace
}  // namespace ringtrain
