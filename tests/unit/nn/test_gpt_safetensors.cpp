// A GPT through safetensors: a model exported and imported into another one (other seed) gives
// bitwise the same parameters and logits, tied or not, with biases or not; the file holds
// GPT-2's names with the Conv1D weights transposed; names without "transformer." load too;
// extra tensors are returned unused; a missing or mis-shaped tensor and an untied lm_head in a
// tied model are one-line errors naming the tensor.
#include <gtest/gtest.h>

#include <cstring>

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
};

Gpt gpt(bool tie, bool bias, std::int64_t n_embd = 16) {
  Gpt g;
  g.config = std::make_unique<Config>(
      Config::parse(fmt::format("[model]\nfamily = \"gpt\"\nn_layer = 2\nn_head = 2\nn_embd = {}\nblock_size = 8\n"
                                "vocab_size = 21\ntie_embeddings = {}\nbias = {}\n",
                                n_embd, tie, bias),
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

// A copy of a file's tensors, renamed or dropped by `rename` (an empty name drops one), plus extras.
std::string rewritten(const std::string& from, const std::string& name,
                      const std::function<std::string(const std::string&)>& rename,
                      const std::vector<std::pair<std::string, Shape>>& extra = {}) {
  const SafetensorsFile f(from);
  std::vector<std::vector<float>> data;
  std::vector<SafetensorsTensor> tensors;
  for (const auto& e : f.tensors()) {
    data.push_back(f.read_f32(e));
    if (!rename(e.name).empty()) tensors.push_back({rename(e.name), e.shape, data.back().data()});
  }
  for (const auto& [n, shape] : extra) {
    data.emplace_back(static_cast<std::size_t>(shape.numel()), 1.0f);
    tensors.push_back({n, shape, data.back().data()});
  }
  const std::string path = temp_file(name);
  write_safetensors(path, tensors, f.metadata());
  return path;
}

std::string import_error(const std::string& path, Gpt& into) {
  try {
    import_gpt_safetensors(path, *into.model, into.model->params().f32());
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
  EXPECT_TRUE(import_gpt_safetensors(path, *b.model, b.model->params().f32()).empty());
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
                [](const std::string& n) { return n.starts_with("transformer.") ? n.substr(12) : n; },
                {{"h.0.attn.bias", Shape{1, 1, 8, 8}}, {"h.1.attn.bias", Shape{1, 1, 8, 8}}});
  b.model->init_params(2);
  EXPECT_EQ(import_gpt_safetensors(path, *b.model, b.model->params().f32()),
            (std::vector<std::string>{"h.0.attn.bias", "h.1.attn.bias"}));
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
  std::vector<SafetensorsTensor> tensors;
  std::vector<std::vector<float>> data;
  data.reserve(f.tensors().size());
  for (const auto& e : f.tensors()) {
    data.push_back(e.name == "lm_head.weight" ? wte : f.read_f32(e));
    tensors.push_back({e.name, e.shape, data.back().data()});
  }
  const std::string same = temp_file("same-head.safetensors");
  write_safetensors(same, tensors, {});
  EXPECT_EQ(import_gpt_safetensors(same, *tied.model, tied.model->params().f32()),
            (std::vector<std::string>{"lm_head.weight"}));
}

TEST(GptSafetensorsFile, MissingAndMisShapedTensorsAreOneLineErrors) {
  Gpt a = gpt(true, true);
  a.model->init_params(1);
  const std::string full = exported(a, "full.safetensors");
  const std::string missing = rewritten(full, "missing.safetensors", [](const std::string& n) {
    return n == "transformer.h.1.mlp.c_fc.bias" ? std::string() : n;
  });
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
  EXPECT_TRUE(import_gpt_safetensors(full, *no_bias.model, no_bias.model->params().f32()).size() == 8)
      << "a model without biases leaves the file's 8 linear biases unused";
  msg = import_error(exported(no_bias, "no-bias.safetensors"), b);
  EXPECT_NE(msg.find("tensor 'transformer.h.0.attn.c_attn.bias' is missing"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

}  // namespace
}  // namespace ringtrain
