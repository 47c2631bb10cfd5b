// Private: the GPT family (model.family = "gpt"): its keys and its expansion into graph nodes
// made by a LayerMaker (see gpt_family.cpp for the architecture).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/nn/model.hpp"
#include "nn/layer_maker.hpp"

namespace ringtrain {

class Config;

struct GptConfig {
  std::int64_t n_layer = 0, n_head = 0, n_embd = 0, block_size = 0, vocab_size = 0;
  double dropout = 0.0;
  bool bias = true;
  bool tie_embeddings = true;
};

// Reads the [model] keys of the family; data_vocab_size (> 0) is model.vocab_size's default.
GptConfig read_gpt_config(Config& model, std::int64_t data_vocab_size);
std::int64_t gpt_block_size(Config& model);
std::string gpt_init_from(Config& model);  // model.init_from: "" for a random start
std::vector<ModelNode> gpt_nodes(const GptConfig& g, LayerMaker& maker);

}  // namespace ringtrain
