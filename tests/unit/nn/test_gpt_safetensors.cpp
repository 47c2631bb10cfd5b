// A GPT through safetensors: a model exported and imported into another one (other seed) gives
// bitwise the same parameters and logits, tied or not, with biases or not; the file holds
// GPT-2's names with the Conv1D weights transposed; names without "transformer." load too;
// extra tensors are returned unused; a missing or mis-shaped tensor and an untied lm_head in a
// tied model are one-line errors naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/gpt_safetensors.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/tensor/safetensors.hpp"
#include "support/test_context.hpp"

namespace ringtrain {
namespace {

constexpr std::int64_t kT = 6;  // tokens per sample: fewer than block_size

std::string temp_file(const std::string& name) {
  static const std::filesystem::path dir = test::temp_dir("gpt-safetensors");
  return (dir / name).string();
}

struct Gpt {
  std::unique_ptr<Config> config;
  std::unique_ptr<Model> model;
  Config model_config() { return config->section("model"); }
  // import_gpt_safetensors into this model's parameters.
  std::vector<std::string> import(const std::string& path) {
    Config m = model_config();
    return import_gpt_safetensors(path, m, *model, model->params().f32());
  }
};

Gpt gpt(bool tie, bool bias, std::int64_t n_embd = 16, std::int64_t n_head = 2) {
  Gpt g;
  g.config = std::make_unique<Config>(
      Config::parse(fmt::format("[model]\nfamily = \"gpt\"\nn_layer = 2\nn_head = {}\nn_embd = {}\nblock_size = 8\n"
                                "vocab_size = 21\ntie_embeddings = {}\nbias = {}\n",
                                n_head, n_embd, tie, bias),
                    "gpt.toml"));
  Config m = g.model_config();
  g.model = build_model(m, Shape{kT});
  return g;
}

std::vector<float> logits(Model& m) {
  Tensor x = Tensor::empty(Shape{2, kT}, DType::i32);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7 + 3) % 21);
  const Tensor& y = m.forward(x, StepInfo{false, 0, 0, 0});
  return {y.f32(), y.f32() + y.numel()};
}

std::vector<float> params_of(const Model& m) { return {m.params().f32(), m.params().f32() + m.arena_elements()}; }

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string exported(Gpt& g, const std::string& name) {
  const std::string path = temp_file(name);
  Config m = g.model_config();
  export_gpt_safetensors(m, *g.model, path);
  return path;
}

// How rewritten() changes a file: tensors renamed or dropped (an empty name drops one), values
// edited, tensors of ones added, the metadata replaced.
struct Rewrite {
  std::function<std::string(const std::string&)> rename = [](const std::string& n) { return n; };
  std::function<void(const std::string&, std::vector<float>&)> edit = [](const std::string&, std::vector<float>&) {};
  std::vector<std::pair<std::string, Shape>> extra = {};
  std::optional<std::map<std::string, std::string>> metadata = std::nullopt;  // unset: the file's
};

std::string rewritten(const std::string& from, const std::string& name, const Rewrite& how) {
  const SafetensorsFile f(from);
  std::vector<std::vector<float>> data;
  std::vector<SafetensorsTensor> tensors;
  for (const auto& e : f.tensors()) {
    data.push_back(f.read_f32(e));
    how.edit(e.name, data.back());
    if (!how.rename(e.name).empty()) tensors.push_back({how.rename(e.name), e.shape, data.back().data()});
  }
  for (const auto& [n, shape] : how.extra) {
    data.emplace_back(static_cast<std::size_t>(shape.numel()), 1.0f);
    tensors.push_back({n, shape, data.back().data()});
  }
  const std::string path = temp_file(name);
  write_safetensors(path, tensors, how.metadata.value_or(f.metadata()));
  return path;
}

std::string import_error(const std::string& path, Gpt& into) {
  try {
    into.import(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

class GptSafetensors : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(GptSafetensors, ImportReproducesTheExportedModelBitwise) {
  const auto [tie, bias] = GetParam();
  Gpt a = gpt(tie, bias), b = gpt(tie, bias);
  a.model->init_params(1);
  b.model->init_params(2);
  const std::vector<float> want = logits(*a.model);
  ASSERT_FALSE(bitwise_equal(logits(*b.model), want));
  const std::string path = exported(a, "model.safetensors");
  EXPECT_TRUE(b.import(path).empty());
  EXPECT_TRUE(bitwise_equal(params_of(*b.model), params_of(*a.model)));
  EXPECT_TRUE(bitwise_equal(logits(*b.model), want));
}

INSTANTIATE_TEST_SUITE_P(TiedAndBias, GptSafetensors, ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(GptSafetensorsFile, HoldsGpt2NamesTransposedConv1dWeightsAndMetadata) {
  Gpt a = gpt(false, true);
  a.model->init_params(1);
  const SafetensorsFile f(exported(a, "names.safetensors"));
  std::vector<std::string> names;
  for (const auto& e : f.tensors()) names.push_back(e.name);
  const std::vector<std::string> block = {
      "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
      "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  std::vector<std::string> want = {"transformer.wte.weight", "transformer.wpe.weight"};
  for (int l = 0; l < 2; ++l)
    for (const auto& n : block) want.push_back("transformer.h." + std::to_string(l) + "." + n);
  for (const auto& n : {"transformer.ln_f.weight", "transformer.ln_f.bias", "lm_head.weight"}) want.push_back(n);
  EXPECT_EQ(names, want);
  EXPECT_EQ(f.find("transformer.wpe.weight")->shape, (Shape{8, 16}));
  EXPECT_EQ(f.find("transformer.h.0.mlp.c_fc.weight")->shape, (Shape{16, 64}));  // Conv1D: [in, out]
  EXPECT_EQ(f.find("lm_head.weight")->shape, (Shape{21, 16}));                   // Linear: [out, in]
  // c_proj is square: only the values show the transposition. Ours is [out, in] in the arena.
  for (const Model::ParamTensor& t : a.model->param_tensors()) {
    if (a.model->layer_name(t.layer) != "h.1.attn.c_proj" || t.name != "weight") continue;
    const std::vector<float> file = f.read_f32(*f.find("transformer.h.1.attn.c_proj.weight"));
    const float* ours = a.model->params().f32() + t.offset;
    for (std::int64_t o = 0; o < 16; ++o)
      for (std::int64_t i = 0; i < 16; ++i) ASSERT_EQ(file[static_cast<std::size_t>(i * 16 + o)], ours[o * 16 + i]);
  }
  const std::map<std::string, std::string> meta = f.metadata();
  EXPECT_EQ(meta.at("format"), "pt");
  EXPECT_EQ(meta.at("n_layer"), "2");
  EXPECT_EQ(meta.at("n_head"), "2");
  EXPECT_EQ(meta.at("n_embd"), "16");
  EXPECT_EQ(meta.at("block_size"), "8");
  EXPECT_EQ(meta.at("vocab_size"), "21");
  EXPECT_EQ(meta.at("bias"), "true");
  EXPECT_EQ(meta.at("tie_embeddings"), "false");
  EXPECT_FALSE(meta.at("ringtrain_version").empty());
  Gpt tied = gpt(true, true);
  tied.model->init_params(1);
  EXPECT_EQ(SafetensorsFile(exported(tied, "tied.safetensors")).find("lm_head.weight"), nullptr);
}

TEST(GptSafetensorsFile, NamesWithoutTheTransformerPrefixAndExtraTensorsLoad) {
  Gpt a = gpt(true, true), b = gpt(true, true);
  a.model->init_params(1);
  const std::string path =
      rewritten(exported(a, "prefixed.safetensors"), "bare.safetensors",
                {.rename = [](const std::string& n) { return n.starts_with("transformer.") ? n.substr(12) : n; },
                 .extra = {{"h.0.attn.bias", Shape{1, 1, 8, 8}}, {"h.1.attn.bias", Shape{1, 1, 8, 8}}}});
  b.model->init_params(2);
  EXPECT_EQ(b.import(path), (std::vector<std::string>{"h.0.attn.bias", "h.1.attn.bias"}));
  EXPECT_TRUE(bitwise_equal(params_of(*b.model), params_of(*a.model)));
}

TEST(GptSafetensorsFile, ATiedModelTakesAnLmHeadEqualToTheTokenTableOnly) {
  Gpt untied = gpt(false, true), tied = gpt(true, true);
  untied.model->init_params(1);
  const std::string path = exported(untied, "untied.safetensors");
  const std::string msg = import_error(path, tied);
  EXPECT_NE(msg.find("lm_head.weight differs from transformer.wte.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tie_embeddings"), std::string::npos) << msg;
  // The untied file with its head replaced by the token table: accepted, the head left unused.
  const SafetensorsFile f(path);
  const std::vector<float> wte = f.read_f32(*f.find("transformer.wte.weight"));
  const std::string same =
      rewritten(path, "same-head.safetensors", {.edit = [&](const std::string& n, std::vector<float>& v) {
                  if (n == "lm_head.weight") v = wte;
                }});
  EXPECT_EQ(tied.import(same), (std::vector<std::string>{"lm_head.weight"}));
}

TEST(GptSafetensorsFile, MissingAndMisShapedTensorsAreOneLineErrors) {
  Gpt a = gpt(true, true);
  a.model->init_params(1);
  const std::string full = exported(a, "full.safetensors");
  const std::string missing = rewritten(full, "missing.safetensors", {.rename = [](const std::string& n) {
                                          return n == "transformer.h.1.mlp.c_fc.bias" ? std::string() : n;
                                        }});
  Gpt b = gpt(true, true);
  std::string msg = import_error(missing, b);
  EXPECT_NE(msg.find(missing + ": tensor 'transformer.h.1.mlp.c_fc.bias' is missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[64]"), std::string::npos) << msg;
  Gpt wide = gpt(true, true, 32);
  msg = import_error(full, wide);
  EXPECT_NE(msg.find("tensor 'transformer.wte.weight' has shape [21, 16] but the model needs [21, 32]"),
            std::string::npos)
      << msg;
  Gpt no_bias = gpt(true, false);
  EXPECT_TRUE(no_bias.import(full).size() == 8) << "a model without biases leaves the file's 8 linear biases unused";
  // A NaN in one tensor: named with its index, not loaded.
  const std::string nan = rewritten(full, "nan.safetensors", {.edit = [](const std::string& n, std::vector<float>& v) {
                                      if (n == "transformer.h.0.ln_1.weight") v[3] = std::nanf("");
                                    }});
  msg = import_error(nan, b);
  EXPECT_NE(msg.find(nan + ": tensor 'transformer.h.0.ln_1.weight' holds nan at index 3"), std::string::npos) << msg;
  msg = import_error(exported(no_bias, "no-bias.safetensors"), b);
  EXPECT_NE(msg.find("tensor 'transformer.h.0.attn.c_attn.bias' is missing"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// Other heads over weights of the same shapes: the file's __metadata__ says which it was
// written for; a file without those keys (PyTorch's own) is judged by its tensors.
TEST(GptSafetensorsFile, AFileForOtherHeadsIsRefusedByItsMetadata) {
  Gpt two = gpt(true, true), four = gpt(true, true, 16, 4);
  two.model->init_params(1);
  const std::string path = exported(two, "two-heads.safetensors");
  const std::string msg = import_error(path, four);
  EXPECT_NE(msg.find(path + ": written for model.n_head = 2 (its __metadata__) but this model has 4"),
            std::string::npos)
      << msg;
  const std::string bare = rewritten(path, "no-metadata.safetensors", {.metadata = {{{"format", "pt"}}}});
  EXPECT_TRUE(four.import(bare).empty());
}

}  // namespace
}  // namespace ringtrain
