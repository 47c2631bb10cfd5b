// export_gpt_safetensors and import_gpt_safetensors (see header). A parameter's HuggingFace name
// follows from its node's name (gpt_family.cpp names nodes after GPT-2's modules), so both
// directions share one mapping: transformer.<node>.<param>, except the position table (our
// wte.position is GPT-2's transformer.wpe.weight) and lm_head (outside "transformer").
#include "ringtrain/nn/gpt_safetensors.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/printable.hpp"
#include "ringtrain/core/version.hpp"
#include "ringtrain/tensor/safetensors.hpp"
#include "nn/gpt_family.hpp"

namespace ringtrain {
namespace {

constexpr std::string_view kPrefix = "transformer.";

struct HfParam {
  std::string name;
  bool conv1d = false;  // stored [in, out]: the transpose of our Linear weight
  Shape shape;          // as stored in the file
};

HfParam hf_param(const Model& model, const Model::ParamTensor& t) {
  const std::string& node = model.layer_name(t.layer);
  if (node == "lm_head") return {"lm_head." + t.name, false, t.shape};
  if (node == "wte" && t.name == "position") return {std::string(kPrefix) + "wpe.weight", false, t.shape};
  if (t.kind == "linear" && t.name == "weight")
    return {std::string(kPrefix) + node + ".weight", true, Shape{t.shape[1], t.shape[0]}};
  return {std::string(kPrefix) + node + "." + t.name, false, t.shape};
}

// dst [cols, rows] = src [rows, cols] transposed.
void transpose(const float* src, std::int64_t rows, std::int64_t cols, float* dst) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

bool has_lm_head(const Model& model) {
  const std::vector<Model::ParamTensor> params = model.param_tensors();
  return std::any_of(params.begin(), params.end(),
                     [&](const Model::ParamTensor& t) { return model.layer_name(t.layer) == "lm_head"; });
}

}  // namespace

void export_gpt_safetensors(Config& model_config, const Model& model, const std::string& path) {
  const GptConfig g = read_gpt_config(model_config, 0);
  const Tensor params = to_host(model.params());
  std::vector<std::vector<float>> transposed;  // owns the Conv1D weights until written
  std::vector<SafetensorsTensor> tensors;
  for (const Model::ParamTensor& t : model.param_tensors()) {
    const HfParam hf = hf_param(model, t);
    const float* data = params.f32() + t.offset;
    if (hf.conv1d) {
      transposed.emplace_back(static_cast<std::size_t>(t.shape.numel()));
      transpose(data, t.shape[0], t.shape[1], transposed.back().data());
      data = transposed.back().data();
    }
    tensors.push_back({hf.name, hf.shape, data});
  }
  const auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  write_safetensors(path, tensors,
                    {{"format", "pt"},
                     {"n_layer", std::to_string(g.n_layer)},
                     {"n_head", std::to_string(g.n_head)},
                     {"n_embd", std::to_string(g.n_embd)},
                     {"block_size", std::to_string(g.block_size)},
                     {"vocab_size", std::to_string(g.vocab_size)},
                     {"bias", flag(g.bias)},
                     {"tie_embeddings", flag(g.tie_embeddings)},
                     {"ringtrain_version", version()}});
}

std::vector<std::string> import_gpt_safetensors(const std::string& path, Config& model_config, const Model& model,
                                                float* params) {
  const SafetensorsFile file(path);
  // The tensors' shapes tell every other architecture key; not n_head, which splits the same
  // weights otherwise. A file that does not name it (PyTorch's own) is judged by its tensors.
  const auto heads = file.metadata().find("n_head");
  const std::string n_head = std::to_string(read_gpt_config(model_config, 0).n_head);
  RT_REQUIRE(heads == file.metadata().end() || heads->second == n_head, ConfigError,
             "{}: written for model.n_head = {} (its __metadata__) but this model has {}", path,
             printable(heads->second), n_head);
  const auto lookup = [&](const std::string& name) {
    const SafetensorsFile::Entry* e = file.find(name);
    return e != nullptr || !name.starts_with(kPrefix) ? e : file.find(std::string_view(name).substr(kPrefix.size()));
  };
  std::set<std::string> used;
  for (const Model::ParamTensor& t : model.param_tensors()) {
    const HfParam hf = hf_param(model, t);
    const SafetensorsFile::Entry* e = lookup(hf.name);
    RT_REQUIRE(e != nullptr, ConfigError, "{}: tensor '{}' is missing (the model needs one of shape {})", path, hf.name,
               hf.shape.str());
    RT_REQUIRE(e->shape == hf.shape, ConfigError, "{}: tensor '{}' has shape {} but the model needs {}", path, e->name,
               e->shape.str(), hf.shape.str());
    const std::vector<float> v = file.read_f32(*e);
    const auto bad = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
    RT_REQUIRE(bad == v.end(), ConfigError, "{}: tensor '{}' holds {} at index {}: training from it gives no loss",
               path, e->name, *bad, bad - v.begin());
    if (hf.conv1d) {
      transpose(v.data(), hf.shape[0], hf.shape[1], params + t.offset);
    } else {
      std::copy(v.begin(), v.end(), params + t.offset);
    }
    used.insert(e->name);
  }
  const SafetensorsFile::Entry* head = file.find("lm_head.weight");
  if (head != nullptr && !has_lm_head(model)) {  // tied: the file's head must be the token table
    const SafetensorsFile::Entry* wte = lookup(std::string(kPrefix) + "wte.weight");
    RT_REQUIRE(head->shape == wte->shape && file.read_f32(*head) == file.read_f32(*wte), ConfigError,
               "{}: lm_head.weight differs from {} but model.tie_embeddings = true (set it to false to load both)",
               path, wte->name);
  }
  std::vector<std::string> unused;
  for (const SafetensorsFile::Entry& e : file.tensors())
    if (used.count(e.name) == 0) unused.push_back(e.name);
  return unused;
}

}  // namespace ringtrain
