// GPT-2 weights between PyTorch and ringtrain, checked on logits (tests/integration/gpt2_torch.py
// holds a GPT-2 forward in plain torch): a file torch wrote under HuggingFace's names loads into
// a ringtrain GPT that reproduces torch's logits, and a file ringtrain exported runs in torch to
// ringtrain's logits (max |a - b| / max |b| < 1e-4 both ways). Skipped (exit 77) where no Python
// imports torch: $RINGTRAIN_TORCH_PYTHON, tools/setup-torch-venv's venv, python3, in that order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "integration/run_command.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/gpt_safetensors.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/tensor/safetensors.hpp"
#include "support/test_context.hpp"

namespace ringtrain::test {
namespace {

namespace fs = std::filesystem;

const std::string kScript = std::string(RINGTRAIN_SOURCE_DIR) + "/tests/integration/gpt2_torch.py";

// The first interpreter that imports torch; "" when none does.
const std::string& torch_python() {
  static const std::string python = [] {
    std::vector<std::string> candidates;
    if (const char* p = std::getenv("RINGTRAIN_TORCH_PYTHON")) candidates.emplace_back(p);
    const char* venv = std::getenv("RINGTRAIN_TORCH_VENV");
    const char* home = std::getenv("HOME");
    if (venv != nullptr) candidates.push_back(std::string(venv) + "/bin/python");
    if (home != nullptr) candidates.push_back(std::string(home) + "/.cache/ringtrain/torch-venv/bin/python");
    candidates.emplace_back("python3");
    for (const auto& c : candidates)
      if (run_command(shell_quote(c) + " -c 'import torch' >/dev/null").exit_code == 0) return c;
    return std::string();
  }();
  return python;
}

const fs::path& work_dir() {
  static const fs::path dir = temp_dir("torch-interop");
  return dir;
}

struct Gpt {
  std::unique_ptr<Config> config;
  std::unique_ptr<Model> model;
};

// A GPT of the architecture in a file's metadata, taking T tokens per sample.
Gpt gpt_of(const std::map<std::string, std::string>& arch, bool tie, std::int64_t t) {
  Gpt g;
  g.config = std::make_unique<Config>(
      Config::parse(fmt::format("[model]\nfamily = \"gpt\"\nn_layer = {}\nn_head = {}\nn_embd = {}\nblock_size = {}\n"
                                "vocab_size = {}\ntie_embeddings = {}\n",
                                arch.at("n_layer"), arch.at("n_head"), arch.at("n_embd"), arch.at("block_size"),
                                arch.at("vocab_size"), tie),
                    "interop.toml"));
  Config m = g.config->section("model");
  g.model = build_model(m, Shape{t});
  return g;
}

std::vector<float> logits_of(Model& m, const std::vector<float>& tokens, std::int64_t batch, std::int64_t t) {
  Tensor x = Tensor::empty(Shape{batch, t}, DType::i32);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    x.data<std::int32_t>()[i] = static_cast<std::int32_t>(tokens[static_cast<std::size_t>(i)]);
  const Tensor& y = m.forward(x, StepInfo{false, 0, 0, 0});
  return {y.f32(), y.f32() + y.numel()};
}

double max_relative_error(const std::vector<float>& ours, const std::vector<float>& ref) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(ours[i]) - ref[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
  }
  return diff / scale;
}

TEST(TorchInterop, RingtrainReproducesTheLogitsOfTorchsGpt2File) {
  if (torch_python().empty()) GTEST_SKIP() << "no Python with torch (tools/setup-torch-venv makes one)";
  const auto r = run_command(shell_quote(torch_python()) + " " + shell_quote(kScript) + " reference " +
                             shell_quote(work_dir().string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const SafetensorsFile expected((work_dir() / "expected.safetensors").string());
  const SafetensorsFile::Entry& tokens = *expected.find("tokens");
  const std::int64_t batch = tokens.shape[0], t = tokens.shape[1];
  Gpt g = gpt_of(expected.metadata(), true, t);
  g.model->init_params(1);
  Config model_config = g.config->section("model");
  const std::vector<std::string> unused = import_gpt_safetensors((work_dir() / "gpt2.safetensors").string(),
                                                                 model_config, *g.model, g.model->params().f32());
  EXPECT_EQ(unused.size(), 4u) << "the attn.bias and attn.masked_bias buffers of both blocks";
  const std::vector<float> ref = expected.read_f32(*expected.find("logits"));
  const std::vector<float> ours = logits_of(*g.model, expected.read_f32(tokens), batch, t);
  ASSERT_EQ(ours.size(), ref.size());
  const double error = max_relative_error(ours, ref);
  EXPECT_LT(error, 1e-4) << r.output;
  std::printf("%smax relative error %.3g over %zu logits\n", r.output.c_str(), error, ref.size());
}

TEST(TorchInterop, TorchReproducesTheLogitsOfRingtrainsExport) {
  if (torch_python().empty()) GTEST_SKIP() << "no Python with torch (tools/setup-torch-venv makes one)";
  constexpr std::int64_t kBatch = 2, kT = 10;
  Gpt g = gpt_of({{"n_layer", "2"}, {"n_head", "2"}, {"n_embd", "24"}, {"block_size", "12"}, {"vocab_size", "37"}},
                 false, kT);
  g.model->init_params(7);
  // Away from GPT-2's initialisation (LayerNorm 1 and 0, biases 0), so every tensor shows.
  float* p = g.model->params().f32();
  for (std::int64_t i = 0; i < g.model->arena_elements(); ++i) p[i] += 0.2f * std::sin(0.7f * static_cast<float>(i));
  Config m = g.config->section("model");
  const std::string weights = (work_dir() / "ours.safetensors").string();
  export_gpt_safetensors(m, *g.model, weights);
  std::vector<float> tokens(kBatch * kT);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<float>((i * 11 + 5) % 37);
  const std::vector<float> logits = logits_of(*g.model, tokens, kBatch, kT);
  const std::string out = (work_dir() / "ours-logits.safetensors").string();
  write_safetensors(
      out, {{"tokens", Shape{kBatch, kT}, tokens.data()}, {"logits", Shape{kBatch, kT, 37}, logits.data()}}, {});
  const auto r = run_command(shell_quote(torch_python()) + " " + shell_quote(kScript) + " check " +
                             shell_quote(weights) + " " + shell_quote(out));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("max relative error"), std::string::npos) << r.output;
  std::printf("%s", r.output.c_str());
}

}  // namespace
}  // namespace ringtrain::test
