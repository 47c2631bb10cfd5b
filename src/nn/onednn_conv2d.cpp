// The CPU convolution through oneDNN (RINGTRAIN_WITH_ONEDNN): its JIT convolutions (direct, in
// the widest vector ISA the CPU has) for forward, backward data and backward weights. Activations
// stay NCHW and the parameters stay in the OIHW arena; each call reorders them to and from the
// layouts oneDNN prefers. Shapes, parameters and initialisation are Conv2d's, whose results it
// matches to rounding (tests/unit/nn/test_cpu_conv2d.cpp). One oneDNN thread per rank, as many as
// OpenBLAS has; with one thread the results are the same run to run.
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>

#include "ringtrain/core/error.hpp"
#include "nn/layer_maker.hpp"
#include "tensor/blas.hpp"
#include "tensor/onednn_sgemm.hpp"

namespace ringtrain {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

class OneDnnConv2d final : public Conv2d {
 public:
  explicit OneDnnConv2d(const Conv2dOptions& options)
      : Conv2d(options), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  void forward(const Tensor& x, Tensor& y, const StepInfo& info) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) override;

 private:
  // The primitives for one batch size (training batches and a last, smaller one differ).
  struct Plan {
    dnnl::convolution_forward::primitive_desc forward;
    dnnl::convolution_backward_data::primitive_desc backward_data;
    dnnl::convolution_backward_weights::primitive_desc backward_weights;
  };
  Plan& plan_for(std::int64_t n);
  memory::desc plain(const memory::dims& dims, Tag tag) const { return {dims, memory::data_type::f32, tag}; }
  memory::dims src_dims(std::int64_t n) const { return {n, c_, h_, w_in_}; }
  memory::dims dst_dims(std::int64_t n) const { return {n, o_.out_channels, oh_, ow_}; }
  memory::dims weight_dims() const { return {o_.out_channels, c_, o_.kernel, o_.kernel}; }
  // `user` (plain, at `data`) in the layout `want`: itself when the layouts agree, else a reordered copy.
  memory to_layout(const memory::desc& user, const void* data, const memory::desc& want);
  // A memory of layout `want` whose contents end up in `user` (plain, at `data`) after from_layout.
  memory scratch_for(const memory::desc& user, void* data, const memory::desc& want);
  void from_layout(memory mem, const memory::desc& user, void* data);

  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<std::int64_t, Plan> plans_;
};

OneDnnConv2d::Plan& OneDnnConv2d::plan_for(std::int64_t n) {
  const auto found = plans_.find(n);
  if (found != plans_.end()) return found->second;
  blas::onednn::use_threads(blas::threads());  // this (the model's) thread runs the primitives
  const memory::desc src(src_dims(n), memory::data_type::f32, Tag::any);
  const memory::desc dst(dst_dims(n), memory::data_type::f32, Tag::any);
  const memory::desc weights(weight_dims(), memory::data_type::f32, Tag::any);
  const memory::desc bias = o_.bias ? plain({o_.out_channels}, Tag::a) : memory::desc();
  const memory::dims strides{o_.stride, o_.stride}, padding{o_.padding, o_.padding};
  const auto algorithm = dnnl::algorithm::convolution_direct;
  dnnl::convolution_forward::primitive_desc forward(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm, src, weights, bias, dst, strides,
                                      padding, padding),
      engine_);
  dnnl::convolution_backward_data::primitive_desc backward_data(
      dnnl::convolution_backward_data::desc(algorithm, src, weights, dst, strides, padding, padding), engine_, forward);
  dnnl::convolution_backward_weights::primitive_desc backward_weights(
      dnnl::convolution_backward_weights::desc(algorithm, src, weights, bias, dst, strides, padding, padding), engine_,
      forward);
  return plans_.emplace(n, Plan{forward, backward_data, backward_weights}).first->second;
}

memory OneDnnConv2d::to_layout(const memory::desc& user, const void* data, const memory::desc& want) {
  memory from(user, engine_, const_cast<void*>(data));  // NOLINT(cppcoreguidelines-pro-type-const-cast): read only
  if (want == user) return from;
  memory to(want, engine_);
  dnnl::reorder(from, to).execute(stream_, from, to);
  return to;
}

memory OneDnnConv2d::scratch_for(const memory::desc& user, void* data, const memory::desc& want) {
  return want == user ? memory(user, engine_, data) : memory(want, engine_);
}

void OneDnnConv2d::from_layout(memory mem, const memory::desc& user, void* data) {
  if (mem.get_desc() == user) return;  // written in place
  memory to(user, engine_, data);
  dnnl::reorder(mem, to).execute(stream_, mem, to);
}

void OneDnnConv2d::forward(const Tensor& x, Tensor& y, const StepInfo& info) {
  const std::int64_t n = x.shape()[0];
  if (n == 0) return Conv2d::forward(x, y, info);
  try {
    const Plan& plan = plan_for(n);
    const memory::desc user_src = plain(src_dims(n), Tag::nchw), user_dst = plain(dst_dims(n), Tag::nchw);
    const memory src = to_layout(user_src, x.raw(), plan.forward.src_desc());
    const memory weights = to_layout(plain(weight_dims(), Tag::oihw), w_.raw(), plan.forward.weights_desc());
    const memory dst = scratch_for(user_dst, y.raw(), plan.forward.dst_desc());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
    if (o_.bias) args.emplace(DNNL_ARG_BIAS, memory(plain({o_.out_channels}, Tag::a), engine_, b_.raw()));
    dnnl::convolution_forward(plan.forward).execute(stream_, args);
    from_layout(dst, user_dst, y.raw());
    stream_.wait();
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("conv2d (oneDNN) forward: {}", e.what()));
  }
}

void OneDnnConv2d::backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) {
  const std::int64_t n = x.shape()[0];
  if (n == 0) return Conv2d::backward(x, y, dy, dx);
  try {
    const Plan& plan = plan_for(n);
    const memory::desc user_src = plain(src_dims(n), Tag::nchw), user_dst = plain(dst_dims(n), Tag::nchw);
    const memory::desc user_weights = plain(weight_dims(), Tag::oihw);
    const auto& pw = plan.backward_weights;
    const memory src = to_layout(user_src, x.raw(), pw.src_desc());
    const memory diff_dst = to_layout(user_dst, dy.raw(), pw.diff_dst_desc());
    const memory diff_weights = scratch_for(user_weights, dw_.raw(), pw.diff_weights_desc());
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_WEIGHTS, diff_weights}};
    if (o_.bias) args.emplace(DNNL_ARG_DIFF_BIAS, memory(plain({o_.out_channels}, Tag::a), engine_, db_.raw()));
    dnnl::convolution_backward_weights(pw).execute(stream_, args);
    from_layout(diff_weights, user_weights, dw_.raw());
    if (dx != nullptr) {
      const auto& pd = plan.backward_data;
      const memory diff_dst_d =
          pd.diff_dst_desc() == diff_dst.get_desc() ? diff_dst : to_layout(user_dst, dy.raw(), pd.diff_dst_desc());
      const memory weights = to_layout(user_weights, w_.raw(), pd.weights_desc());
      const memory diff_src = scratch_for(user_src, dx->raw(), pd.diff_src_desc());
      dnnl::convolution_backward_data(pd).execute(
          stream_, {{DNNL_ARG_DIFF_DST, diff_dst_d}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DIFF_SRC, diff_src}});
      from_layout(diff_src, user_src, dx->raw());
    }
    stream_.wait();
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("conv2d (oneDNN) backward: {}", e.what()));
  }
}

}  // namespace

std::unique_ptr<Layer> make_cpu_conv2d(const Conv2dOptions& options) { return std::make_unique<OneDnnConv2d>(options); }

std::string cpu_conv2d_library() { return blas::onednn::description(); }

}  // namespace ringtrain
