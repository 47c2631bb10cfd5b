// A GPT's parameters (model.family = "gpt") as a safetensors file under the names of
// HuggingFace's GPT-2 (transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...), so that
// PyTorch code loads it as it loads GPT-2. GPT-2's attention and MLP projections are Conv1D
// modules whose weight is [in, out] while ours are Linear [out, in]: those weights are
// transposed both ways (as nanoGPT's from_pretrained does); lm_head is [vocab, n_embd] in both.
#pragma once
#include <string>
#include <vector>

#include "ringtrain/nn/model.hpp"

namespace ringtrain {

class Config;

// Writes `model`'s parameters (on the host) to path, atomically, with __metadata__ {"format":
// "pt", n_layer, n_head, n_embd, block_size, vocab_size, bias, tie_embeddings,
// ringtrain_version}. model_config: the [model] table of family "gpt" it was built from.
// lm_head.weight is written only when not tied to the token embedding.
void export_gpt_safetensors(Config& model_config, const Model& model, const std::string& path);

// Fills `params` (model.arena_elements() floats: the parameter arena on the host) from the file.
// Every parameter of the model must be there (names with or without the "transformer." prefix)
// with its shape, as F32, F16 or BF16; ConfigError naming the tensor and both shapes otherwise
// (DataError for a malformed file). A tied model accepts a file's lm_head.weight only when it
// equals the token embedding. A file whose __metadata__ gives n_head (export_gpt_safetensors's)
// must give model_config's. Returns the names of the file's tensors left unused.
std::vector<std::string> import_gpt_safetensors(const std::string& path, Config& model_config, const Model& model,
                                                float* params);

}  // namespace ringtrain
