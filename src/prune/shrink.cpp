// Structured pruning made real: the kept neurons of a masked MLP copied into a smaller MLP.
// A hidden neuron whose weight row and bias are 0 outputs relu(0) = 0, so dropping it and
// the next layer's matching input column computes exactly the same function.
#include <algorithm>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/prune/pruner.hpp"

namespace ringtrain {
namespace {

// Rows of a [rows, cols] weight at `offset` that are not entirely masked.
std::vector<std::int64_t> kept_rows(const float* mask, std::int64_t offset, std::int64_t rows, std::int64_t cols) {
  std::vector<std::int64_t> kept;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = mask + offset + r * cols;
    if (std::any_of(row, row + cols, [](float v) { return v != 0.0f; })) kept.push_back(r);
  }
  return kept;
}

}  // namespace

std::vector<std::int64_t> kept_neurons_per_linear(Model& model, const float* mask) {
  std::vector<std::int64_t> out;
  for (const auto& t : model.param_tensors())
    if (t.kind == "linear" && t.name == "weight")
      out.push_back(static_cast<std::int64_t>(kept_rows(mask, t.offset, t.shape[0], t.shape[1]).size()));
  return out;
}

void copy_kept_neurons(Model& dense, const float* mask, Model& shrunk) {
  const auto from = dense.param_tensors();
  const auto to = shrunk.param_tensors();
  RT_REQUIRE(from.size() == to.size(), Error, "shrink: the dense model has {} parameter tensors, the shrunk one {}",
             from.size(), to.size());
  const float* src = dense.params().f32();
  float* dst = shrunk.params().f32();
  std::vector<std::int64_t> columns;  // inputs kept from the previous linear layer (first: all)
  std::vector<std::int64_t> rows;     // neurons kept in the current one
  for (std::size_t i = 0; i < from.size(); ++i) {
    const Model::ParamTensor& f = from[i];
    const Model::ParamTensor& t = to[i];
    RT_REQUIRE(f.kind == "linear" && t.kind == "linear", Error,
               "shrink: layer {} is {}; only MLPs (linear layers between elementwise ones) can be shrunk", f.layer,
               f.kind);
    if (f.name == "weight") {
      const std::int64_t in = f.shape[1];
      if (columns.empty())
        for (std::int64_t c = 0; c < in; ++c) columns.push_back(c);
      rows = kept_rows(mask, f.offset, f.shape[0], in);
      const Shape want{static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(columns.size())};
      RT_REQUIRE(t.shape == want, Error, "shrink: layer {}: the shrunk weight is {} but the kept neurons need {}",
                 t.layer, t.shape.str(), want.str());
      for (std::size_t r = 0; r < rows.size(); ++r)
        for (std::size_t c = 0; c < columns.size(); ++c)
          dst[t.offset + static_cast<std::int64_t>(r * columns.size() + c)] = src[f.offset + rows[r] * in + columns[c]];
    } else {  // bias of the same layer
      RT_REQUIRE(t.shape.numel() == static_cast<std::int64_t>(rows.size()), Error,
                 "shrink: layer {}: the shrunk bias has {} entries but {} neurons are kept", t.layer, t.shape.numel(),
                 rows.size());
      for (std::size_t r = 0; r < rows.size(); ++r)
        dst[t.offset + static_cast<std::int64_t>(r)] = src[f.offset + rows[r]];
    }
    const bool layer_done = i + 1 == from.size() || from[i + 1].layer != f.layer;
    if (layer_done) columns = rows;
  }
}

}  // namespace ringtrain
