// Host tensors: Tensor::empty zero-fills and aligns small and mapped ones alike; Tensor::wrap
// keeps the device it is given; add_into_each
// adds the source to every target (one to four, across block boundaries and a ragged end) and
// refuses mismatched or too many targets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/tensor_ops.hpp"

namespace ringtrain {
namespace {

Tensor filled(std::int64_t n, float first) {
  Tensor t = Tensor::empty(Shape{n});
  for (std::int64_t i = 0; i < n; ++i) t.f32()[i] = first + static_cast<float>(i % 7);
  return t;
}

// Small tensors come from the heap, large ones from anonymous mappings: both zero-filled,
// 64-byte aligned, writable to the last element, and released with the last view.
TEST(TensorEmpty, SmallAndMappedTensorsAreZeroAlignedAndWritable) {
  for (const std::int64_t n : {std::int64_t{10}, std::int64_t{1} << 20}) {
    Tensor t = Tensor::empty(Shape{n});
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw()) % 64, 0u) << n;
    const float* x = t.f32();
    EXPECT_TRUE(std::all_of(x, x + n, [](float v) { return v == 0.0f; })) << n;
    t.f32()[n - 1] = 1.5f;
    const Tensor view = t.rows(n - 1, 1);
    t = Tensor();  // the view keeps the storage alive
    EXPECT_EQ(view.f32()[0], 1.5f) << n;
  }
}

// A wrapped view says where its memory is: a model's gradients placed in device buffers (ZeRO
// stage 2 on a GPU, a tied parameter's summed scratch) are device tensors, so a tensor op takes
// them where they are instead of refusing a host/device mix (or reading device memory on the host).
TEST(TensorWrap, IsAViewOnTheDeviceItIsGiven) {
  std::vector<float> data(6, 1.0f);
  const Tensor host = Tensor::wrap(data.data(), Shape{2, 3});
  EXPECT_EQ(host.device(), Device::cpu);
  EXPECT_EQ(host.raw(), data.data());
  const Tensor device = Tensor::wrap(data.data(), Shape{2, 3}, DType::f32, Device::cuda);
  EXPECT_EQ(device.device(), Device::cuda);
  EXPECT_EQ(device.rows(1, 1).device(), Device::cuda) << "views keep the device";
  EXPECT_THROW(add_into(device, host), Error);  // refused before any GPU call: the devices differ
  add_into(host, Tensor::wrap(data.data(), Shape{6}));
  EXPECT_EQ(data[5], 2.0f);
}

TEST(AddIntoEach, AddsTheSourceToEveryTarget) {
  constexpr std::int64_t n = 5000;  // more than two of the host loop's blocks, not a multiple of one
  const Tensor src = filled(n, 0.5f);
  for (int count = 1; count <= 4; ++count) {
    std::vector<Tensor> targets;
    targets.reserve(static_cast<std::size_t>(count));
    for (int k = 0; k < count; ++k) targets.push_back(filled(n, 10.0f * static_cast<float>(k)));
    std::vector<const Tensor*> pointers;
    pointers.reserve(targets.size());
    for (const Tensor& t : targets) pointers.push_back(&t);
    add_into_each(pointers, src);
    for (int k = 0; k < count; ++k)
      for (std::int64_t i = 0; i < n; ++i)
        ASSERT_EQ(targets[static_cast<std::size_t>(k)].f32()[i],
                  10.0f * static_cast<float>(k) + static_cast<float>(i % 7) + src.f32()[i])
            << "target " << k << " of " << count << ", element " << i;
  }
}

TEST(AddIntoEach, RefusesMismatchedOrTooManyTargets) {
  const Tensor src = filled(8, 0.0f);
  const Tensor shorter = filled(7, 0.0f);
  EXPECT_THROW(add_into_each({&shorter}, src), Error);
  EXPECT_THROW(add_into_each({}, src), Error);
  std::vector<Tensor> five;
  five.reserve(5);
  for (int k = 0; k < 5; ++k) five.push_back(filled(8, 0.0f));
  EXPECT_THROW(add_into_each({&five[0], &five[1], &five[2], &five[3], &five[4]}, src), Error);
}

}  // namespace
}  // namespace ringtrain
