// Casts between f32/bf16/f16 (through float, with launch.cuh's host-identical rounding), the
// element-wise sum of two tensors of any of those dtypes, and f32 accumulate into several
// targets, scale and mask.
#include "kernels/launch.cuh"
#include "kernels/tensor_kernels.hpp"
#include "check/cuda_check.hpp"

namespace ringtrain::kernels {
namespace {

using namespace detail;

// Elements per vector of a cast: 16 bytes of the narrower dtype (8 values between f32 and
// bf16/f16: 32 bytes of f32).
template <typename From, typename To>
constexpr int kCastVector = kPack<From> > kPack<To> ? kPack<From> : kPack<To>;

template <typename From, typename To>
__global__ void cast_kernel(const From* __restrict__ src, To* __restrict__ dst, std::int64_t n, bool vectorized) {
  constexpr int K = kCastVector<From, To>;
  for_each_vector<K>(
      n, vectorized,
      [&](std::int64_t p) {
        const Vec<From, K> x = reinterpret_cast<const Vec<From, K>*>(src)[p];
        Vec<To, K> y;
        for (int k = 0; k < K; ++k) y.v[k] = from_float<To>(to_float(x.v[k]));
        reinterpret_cast<Vec<To, K>*>(dst)[p] = y;
      },
      [&](std::int64_t i) { dst[i] = from_float<To>(to_float(src[i])); });
}

// a + b in float, rounded once (launch_map: y may alias a or b, so dst += src is add(dst, dst, src)).
template <typename T>
struct AddOp {
  static constexpr int kInputs = 2;
  __device__ T operator()(T a, T b) const { return from_float<T>(to_float(a) + to_float(b)); }
};

// The targets by value: a kernel argument, no device copy of the pointer array.
struct AccumulateTargets {
  float* dst[kMaxAccumulateTargets];
  int count;
};

__global__ void accumulate_each_kernel(AccumulateTargets t, const float* __restrict__ src, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    const float s = src[i];
    for (int k = 0; k < t.count; ++k) t.dst[k][i] += s;
  }
}

__global__ void scale_kernel(float* x, float factor, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) x[i] *= factor;
}

// A select, not a product: a masked element becomes +0 even when it was negative or NaN.
__global__ void apply_mask_kernel(float* __restrict__ x, const float* __restrict__ mask, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    if (mask[i] == 0.0f) x[i] = 0.0f;
}

}  // namespace

void launch_cast(const void* src, DType from, void* dst, DType to, std::int64_t n, void* stream) {
  dispatch_float(from, "cast (source)", [&](auto from_tag) {
    dispatch_float(to, "cast (destination)", [&](auto to_tag) {
      using From = decltype(from_tag);
      using To = decltype(to_tag);
      require_count("cast", n);
      if (n == 0) return;
      if (from == to) {
        RT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(To), cudaMemcpyDeviceToDevice,
                                      as_stream(stream)));
        return;
      }
      constexpr int K = kCastVector<From, To>;
      const bool vectorized = aligned_to(src, sizeof(From) * K) && aligned_to(dst, sizeof(To) * K);
      launch_vectorized<K>(cast_kernel<From, To>, "cast_kernel", n, vectorized, stream, static_cast<const From*>(src),
                           static_cast<To*>(dst), n, vectorized);
    });
  });
}

void launch_add(void* y, const void* a, const void* b, std::int64_t n, DType dtype, void* stream) {
  dispatch_float(dtype, "add", [&](auto tag) {
    using T = decltype(tag);
    launch_map("add_kernel", AddOp<T>{}, static_cast<T*>(y), static_cast<const T*>(a), static_cast<const T*>(b), n,
               stream);
  });
}

void launch_accumulate_each(float* const* dsts, int count, const float* src, std::int64_t n, void* stream) {
  RT_REQUIRE(count >= 1 && count <= kMaxAccumulateTargets, Error, "accumulate_each: {} targets (1..{})", count,
             kMaxAccumulateTargets);
  AccumulateTargets t{};
  for (int k = 0; k < count; ++k) t.dst[k] = dsts[k];
  t.count = count;
  launch_elementwise(accumulate_each_kernel, "accumulate_each_kernel", n, stream, t, src, n);
}

void launch_scale(float* x, float factor, std::int64_t n, void* stream) {
  launch_elementwise(scale_kernel, "scale_kernel", n, stream, x, factor, n);
}

void launch_apply_mask(float* x, const float* mask, std::int64_t n, void* stream) {
  launch_elementwise(apply_mask_kernel, "apply_mask_kernel", n, stream, x, mask, n);
}

}  // namespace ringtrain::kernels
