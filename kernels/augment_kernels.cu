// GPU augmentation: one thread per output element maps it back to its source pixel (or the
// padding) and looks the normalized value up in the per-channel u8 table the CPU decoder
// made, so f32 results are the CPU's bit for bit (other dtypes: those values, rounded).
#include "kernels/augment_kernels.hpp"
#include "kernels/launch.cuh"

namespace ringtrain::kernels {
namespace {

using namespace detail;

constexpr std::int64_t kU8Values = 256;

template <typename T>
__global__ void augment_u8_kernel(const std::uint8_t* __restrict__ src, const AugmentDraw* __restrict__ draws,
                                  const float* __restrict__ table, std::int64_t total, std::int64_t c, std::int64_t h,
                                  std::int64_t w, std::int64_t padding, T* __restrict__ dst) {
  for (std::int64_t i = grid_start(); i < total; i += grid_stride()) {
    const std::int64_t x = i % w;
    const std::int64_t y = (i / w) % h;
    const std::int64_t plane = i / (w * h);  // sample * c + channel
    const std::int64_t ch = plane % c;
    const AugmentDraw d = draws[plane / c];
    const std::int64_t sy = y + d.dy - padding;
    const std::int64_t sx = (d.flip ? w - 1 - x : x) + d.dx - padding;
    const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
    const std::uint8_t v = inside ? src[(plane * h + sy) * w + sx] : 0;
    dst[i] = from_float<T>(table[ch * kU8Values + v]);
  }
}

}  // namespace

void launch_augment_u8(const std::uint8_t* src, const AugmentDraw* draws, const float* table, std::int64_t n,
                       std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t padding, void* dst, DType dtype,
                       void* stream) {
  RT_REQUIRE(n >= 0 && c >= 0 && h >= 0 && w >= 0 && padding >= 0, Error,
             "augment_u8: negative extent in [{}, {}, {}, {}] or padding {}", n, c, h, w, padding);
  dispatch_float(dtype, "augment_u8", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t total = n * c * h * w;
    launch_elementwise(augment_u8_kernel<T>, "augment_u8_kernel", total, stream, src, draws, table, total, c, h, w,
                       padding, static_cast<T*>(dst));
  });
}

}  // namespace ringtrain::kernels
