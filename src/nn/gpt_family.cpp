// model.family = "gpt": the GPT-2 architecture expanded into graph nodes. Token and learned
// position embeddings, n_layer pre-LayerNorm blocks (causal self-attention with a fused QKV
// projection and an output projection; an MLP 4x wide with tanh-GELU; each sub-block added to
// the residual stream), a final LayerNorm and the LM head, optionally tied to the token
// embedding. GPT-2 initialisation: weights N(0, 0.02), the residual projections N(0, 0.02 /
// sqrt(2 n_layer)), biases 0, LayerNorm 1 and 0. Nodes are named after GPT-2's modules
// ("h.0.attn.c_attn"), which is what the safetensors export maps to PyTorch names.
#include "nn/gpt_family.hpp"

#include <cmath>

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {

const IntKey kNLayer({.name = "model.n_layer",
                      .doc = "transformer blocks",
                      .range = {1, 1024},
                      .required = true,
                      .read_when = {"model.family", {"gpt"}}},
                     0);
const IntKey kNHead({.name = "model.n_head",
                     .doc = "attention heads per block (`n_embd` must be a multiple)",
                     .range = {1, 1024},
                     .required = true,
                     .read_when = {"model.family", {"gpt"}}},
                    0);
const IntKey kNEmbd({.name = "model.n_embd",
                     .doc = "width of the residual stream",
                     .range = {1, std::int64_t{1} << 16},
                     .required = true,
                     .read_when = {"model.family", {"gpt"}}},
                    0);
const IntKey kBlockSize({.name = "model.block_size",
                         .doc = "longest input (rows of the position embedding); the default of `data.block_size`",
                         .range = {1, std::int64_t{1} << 20},
                         .required = true,
                         .read_when = {"model.family", {"gpt"}}},
                        0);
const IntKey kVocabSize({.name = "model.vocab_size",
                         .doc = "tokens the model embeds and predicts (at least the data's vocabulary; GPT-2 pads "
                                "50257 to 50304 for speed)",
                         .range = {2, std::int64_t{1} << 31},
                         .default_doc = "the token data's `vocab_size`",
                         .read_when = {"model.family", {"gpt"}}},
                        0);
const NumberKey kDropout(
    {.name = "model.dropout",
     .doc = "dropout probability after the embeddings and each residual projection (training only)",
     .range = {0.0, 0.99},
     .read_when = {"model.family", {"gpt"}}},
    0.0);
const BoolKey kBias({.name = "model.bias",
                     .doc = "biases in the linear layers (the LayerNorms always have one)",
                     .read_when = {"model.family", {"gpt"}}},
                    true);
const BoolKey kTieEmbeddings({.name = "model.tie_embeddings",
                              .doc = "the LM head uses the token embedding's weights (as GPT-2)",
                              .read_when = {"model.family", {"gpt"}}},
                             true);
const StringKey kInitFrom({.name = "model.init_from",
                           .doc = "a safetensors file with HuggingFace GPT-2's tensor names (as `ringtrain ckpt "
                                  "export` writes) whose weights a new run starts from instead of the random "
                                  "initialisation (not when resuming)",
                           .default_doc = "none: random",
                           .read_when = {"model.family", {"gpt"}}},
                          "");

constexpr double kInitStd = 0.02;
constexpr double kLayerNormEps = 1e-5;

class GptNodes {
 public:
  GptNodes(const GptConfig& g, LayerMaker& maker) : g_(g), maker_(maker) {}

  std::vector<ModelNode> build() {
    add("wte", maker_.embedding(g_.vocab_size, g_.block_size, g_.n_embd));
    std::string residual = maybe_dropout("drop");
    const double proj_std = kInitStd / std::sqrt(2.0 * static_cast<double>(g_.n_layer));
    const std::int64_t c = g_.n_embd;
    for (std::int64_t l = 0; l < g_.n_layer; ++l) {
      const std::string h = "h." + std::to_string(l) + ".";
      add(h + "ln_1", maker_.layernorm(kLayerNormEps), {residual});
      add(h + "attn.c_attn", maker_.linear(3 * c, g_.bias, kInitStd));
      add(h + "attn", maker_.attention(g_.n_head));
      add(h + "attn.c_proj", maker_.linear(c, g_.bias, proj_std));
      const std::string attn_out = maybe_dropout(h + "attn.drop");
      add(h + "res_1", maker_.add(), {residual, attn_out});
      residual = h + "res_1";
      add(h + "ln_2", maker_.layernorm(kLayerNormEps));
      add(h + "mlp.c_fc", maker_.linear(4 * c, g_.bias, kInitStd));
      add(h + "mlp.gelu", maker_.gelu());
      add(h + "mlp.c_proj", maker_.linear(c, g_.bias, proj_std));
      const std::string mlp_out = maybe_dropout(h + "mlp.drop");
      add(h + "res_2", maker_.add(), {residual, mlp_out});
      residual = h + "res_2";
    }
    add("ln_f", maker_.layernorm(kLayerNormEps));
    add("lm_head", maker_.linear(g_.vocab_size, false, kInitStd));
    if (g_.tie_embeddings) nodes_.back().ties.push_back(ParamTie{0, "wte", 0});
    return std::move(nodes_);
  }

 private:
  void add(const std::string& name, std::unique_ptr<Layer> layer, std::vector<std::string> inputs = {}) {
    nodes_.push_back({std::move(layer), name, std::move(inputs), {}});
  }
  // A dropout node after the last one when model.dropout > 0; the name of the value that follows.
  std::string maybe_dropout(const std::string& name) {
    if (g_.dropout > 0.0) add(name, maker_.dropout(g_.dropout, static_cast<int>(nodes_.size())));
    return nodes_.back().name;
  }

  const GptConfig& g_;
  LayerMaker& maker_;
  std::vector<ModelNode> nodes_;
};

}  // namespace

GptConfig read_gpt_config(Config& model, std::int64_t data_vocab_size) {
  GptConfig g;
  g.n_layer = model.get(kNLayer);
  g.n_head = model.get(kNHead);
  g.n_embd = model.get(kNEmbd);
  g.block_size = model.get(kBlockSize);
  g.vocab_size = data_vocab_size > 0 ? model.get(kVocabSize, data_vocab_size) : model.get(kVocabSize);
  RT_REQUIRE(g.vocab_size > 0, ConfigError, "config: {}: model.vocab_size: required without token data to take it from",
             model.source());
  g.dropout = model.get(kDropout);
  g.bias = model.get(kBias);
  g.tie_embeddings = model.get(kTieEmbeddings);
  RT_REQUIRE(g.n_embd % g.n_head == 0, ConfigError,
             "config: {}: model.n_embd = {} is not a multiple of model.n_head = {}", model.source(), g.n_embd,
             g.n_head);
  return g;
}

std::int64_t gpt_block_size(Config& model) { return model.get(kBlockSize); }

std::string gpt_init_from(Config& model) { return model.get(kInitFrom); }

std::vector<ModelNode> gpt_nodes(const GptConfig& g, LayerMaker& maker) { return GptNodes(g, maker).build(); }

}  // namespace ringtrain
