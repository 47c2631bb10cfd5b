// CudnnAttention: cuDNN's SDPA forward and backward graphs for one shape (cudnn_attention.hpp).
// Tensors are described by dims [N, heads, T, hs] and strides into the layer's own buffers, so
// cuDNN reads and writes the fused layouts directly (no layout kernels, no copies).
#include "nn/cuda/cudnn_attention.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <unordered_map>
#include <utility>

#include "ringtrain/core/error.hpp"

#if RINGTRAIN_HAVE_CUDNN_FRONTEND
#include <cudnn_frontend.h>
#endif

namespace ringtrain::cuda {

#if RINGTRAIN_HAVE_CUDNN_FRONTEND
namespace fe = cudnn_frontend;

namespace {

// The graphs' tensor ids (the variant packs map them to device pointers).
enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kLse, kDo, kDq, kDk, kDv };

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// Dims [N, heads, T, hs] of a head-strided view into a [N, T, row] buffer.
struct Strided {
  std::vector<std::int64_t> dims, strides;
};

Strided heads_view(const AttentionShape& s, std::int64_t row) {
  return {{s.n, s.heads, s.t, s.head_size}, {s.t * row, s.head_size, row, 1}};
}

Strided lse_view(const AttentionShape& s) { return {{s.n, s.heads, s.t, 1}, {s.heads * s.t, s.t, 1, 1}}; }

TensorPtr input(fe::graph::Graph& g, const char* name, std::int64_t uid, const Strided& v) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(v.dims).set_stride(v.strides));
}

void output(const TensorPtr& t, std::int64_t uid, const Strided& v) {
  t->set_output(true).set_uid(uid).set_dim(v.dims).set_stride(v.strides);
}

std::shared_ptr<fe::graph::Graph> new_graph(DType dtype) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(dtype == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

float softmax_scale(const AttentionShape& s) { return 1.0f / std::sqrt(static_cast<float>(s.head_size)); }

std::shared_ptr<fe::graph::Graph> forward_graph(const AttentionShape& s, DType dtype) {
  auto g = new_graph(dtype);
  const Strided qkv = heads_view(s, 3 * s.n_embd()), out = heads_view(s, s.n_embd());
  auto options = fe::graph::SDPA_attributes()
                     .set_name("causal_attention")
                     .set_generate_stats(true)
                     .set_attn_scale(softmax_scale(s))
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0);
  auto [o, lse] = g->sdpa(input(*g, "q", kQ, qkv), input(*g, "k", kK, qkv), input(*g, "v", kV, qkv), options);
  output(o, kO, out);
  output(lse, kLse, lse_view(s));
  lse->set_data_type(fe::DataType_t::FLOAT);
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const AttentionShape& s, DType dtype) {
  auto g = new_graph(dtype);
  const Strided qkv = heads_view(s, 3 * s.n_embd()), out = heads_view(s, s.n_embd());
  auto lse = input(*g, "lse", kLse, lse_view(s));
  lse->set_data_type(fe::DataType_t::FLOAT);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("causal_attention_backward")
                     .set_attn_scale(softmax_scale(s))
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0)
                     .set_deterministic_algorithm(true);
  auto [dq, dk, dv] = g->sdpa_backward(input(*g, "q", kQ, qkv), input(*g, "k", kK, qkv), input(*g, "v", kV, qkv),
                                       input(*g, "o", kO, out), input(*g, "do", kDo, out), lse, options);
  output(dq, kDq, qkv);
  output(dk, kDk, qkv);
  output(dv, kDv, qkv);
  return g;
}

// Builds `g` (validation, cuDNN's heuristics, support check, plans); false with cuDNN's message
// in `why_not` when it cannot.
bool build(fe::graph::Graph& g, cudnnHandle_t handle, const char* what, std::string& why_not) {
  try {  // the frontend reports by error_t, but parts of it (its older descriptor API) throw
    fe::error_t status = g.build(handle, {fe::HeurMode_t::A});
    if (status.is_good()) return true;
    why_not = fmt::format("cuDNN cannot build the {} graph: {}", what, status.get_message());
  } catch (const std::exception& e) {
    why_not = fmt::format("cuDNN cannot build the {} graph: {}", what, e.what());
  }
  return false;
}

std::int64_t workspace_of(const fe::graph::Graph& g) {
  std::int64_t bytes = 0;
  fe::error_t status = g.get_workspace_size(bytes);
  RT_REQUIRE(status.is_good(), Error, "cuDNN attention: get_workspace_size: {}", status.get_message());
  return bytes;
}

void execute(const fe::graph::Graph& g, cudnnHandle_t handle, std::unordered_map<std::int64_t, void*>& pack,
             void* workspace, const char* what) {
  fe::error_t status = g.execute(handle, pack, workspace);
  RT_REQUIRE(status.is_good(), Error, "cuDNN attention: {}: {}", what, status.get_message());
}

// A byte offset into a device buffer (cuDNN takes the pack's pointers as void*).
void* at(const void* base, std::int64_t elements, DType dtype) {
  return static_cast<char*>(const_cast<void*>(base)) + elements * static_cast<std::int64_t>(dtype_size(dtype));
}

}  // namespace

std::string CudnnAttention::frontend_version() {
  return fmt::format("{}.{}.{}", CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION,
                     CUDNN_FRONTEND_PATCH_VERSION);
}

struct CudnnAttention::Graphs {
  std::shared_ptr<fe::graph::Graph> forward, backward;
  DType dtype;
};

std::unique_ptr<CudnnAttention> CudnnAttention::create(Cudnn& dnn, const AttentionShape& shape, DType dtype,
                                                       std::string& why_not) {
  if (dtype != DType::bf16 && dtype != DType::f16) {
    why_not = fmt::format("cuDNN's fused attention takes bf16 or f16 activations, not {}", dtype_name(dtype));
    return nullptr;
  }
  auto graphs = std::make_unique<Graphs>(Graphs{forward_graph(shape, dtype), backward_graph(shape, dtype), dtype});
  const cudnnHandle_t handle = dnn.get();
  if (!build(*graphs->forward, handle, "forward", why_not) || !build(*graphs->backward, handle, "backward", why_not))
    return nullptr;
  return std::unique_ptr<CudnnAttention>(new CudnnAttention(dnn, shape, std::move(graphs)));
}

CudnnAttention::CudnnAttention(Cudnn& dnn, const AttentionShape& shape, std::unique_ptr<Graphs> graphs)
    : dnn_(dnn), shape_(shape), graphs_(std::move(graphs)) {
  workspace_bytes_ =
      static_cast<std::size_t>(std::max(workspace_of(*graphs_->forward), workspace_of(*graphs_->backward)));
}

void CudnnAttention::forward(const void* qkv, void* y, float* lse, void* workspace, void* stream) {
  const std::int64_t c = shape_.n_embd();
  const DType dt = graphs_->dtype;
  std::unordered_map<std::int64_t, void*> pack{
      {kQ, at(qkv, 0, dt)}, {kK, at(qkv, c, dt)}, {kV, at(qkv, 2 * c, dt)}, {kO, y}, {kLse, lse}};
  execute(*graphs_->forward, dnn_.on(stream), pack, workspace, "forward");
}

void CudnnAttention::backward(const void* qkv, const void* y, const void* dy, const float* lse, void* dqkv,
                              void* workspace, void* stream) {
  const std::int64_t c = shape_.n_embd();
  const DType dt = graphs_->dtype;
  std::unordered_map<std::int64_t, void*> pack{
      {kQ, at(qkv, 0, dt)},       {kK, at(qkv, c, dt)},         {kV, at(qkv, 2 * c, dt)},
      {kO, const_cast<void*>(y)}, {kDo, const_cast<void*>(dy)}, {kLse, const_cast<float*>(lse)},
      {kDq, at(dqkv, 0, dt)},     {kDk, at(dqkv, c, dt)},       {kDv, at(dqkv, 2 * c, dt)}};
  execute(*graphs_->backward, dnn_.on(stream), pack, workspace, "backward");
}

#else  // built without the cudnn-frontend headers: no object can be made

std::string CudnnAttention::frontend_version() { return ""; }

struct CudnnAttention::Graphs {};

std::unique_ptr<CudnnAttention> CudnnAttention::create(Cudnn&, const AttentionShape&, DType, std::string& why_not) {
  why_not =
      "this build has no cuDNN fused attention (CMake did not find the cudnn-frontend headers; set "
      "CUDNN_FRONTEND_HOME to a checkout of https://github.com/NVIDIA/cudnn-frontend and reconfigure)";
  return nullptr;
}

void CudnnAttention::forward(const void*, void*, float*, void*, void*) {
  throw Error("CudnnAttention::forward: built without cudnn-frontend");
}

void CudnnAttention::backward(const void*, const void*, const void*, const float*, void*, void*, void*) {
  throw Error("CudnnAttention::backward: built without cudnn-frontend");
}

#endif

CudnnAttention::~CudnnAttention() = default;

}  // namespace ringtrain::cuda
