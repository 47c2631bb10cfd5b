// `ringtrain generate CHECKPOINT --prompt TEXT --max-tokens N`: continues a prompt with a trained
// GPT on one process (more ranks are refused: one sequence has nothing to share). Only the
// checkpoint is read (its resolved config and parameters), never a dataset. The checkpoint does
// not record the tokenizer, so --prompt text goes through the byte tokenizer (token = byte), the
// one ringtrain makes; other tokenizers: --prompt-tokens and --json's token ids.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/number_checks.hpp"
#include "ringtrain/ckpt/checkpoint.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/nn/generator.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"

namespace ringtrain {
namespace {

constexpr std::int64_t kByteVocab = 256;

struct GenerateOptions {
  std::string path;
  std::string prompt;
  std::string prompt_tokens;  // comma-separated ids
  std::int64_t max_tokens = 0;
  double temperature = 1.0;
  std::int64_t top_k = 0;
  std::uint64_t seed = 0;
  bool json = false;
  bool kv_cache = true;
  int threads = 0;
};

// The byte tokenizer's decoding: a token below 256 is that byte (invalid UTF-8 passes through);
// a larger id (another tokenizer's, or a padded vocabulary's) is written <|id|>.
std::string decode(const std::vector<std::int32_t>& tokens) {
  std::string text;
  for (const std::int32_t t : tokens)
    text += t < kByteVocab ? std::string(1, static_cast<char>(t)) : fmt::format("<|{}|>", t);
  return text;
}

void write_stdout(const std::string& bytes) {
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  std::fflush(stdout);
}

// The generator for the checkpoint's model (its resolved config's [model]), with the checkpoint's
// parameters once their size is checked against the model; errors name the checkpoint.
Generator load(const Context& ctx, const GenerateOptions& o) {
  std::vector<CheckpointDataset> datasets;
  const CheckpointMeta meta = inspect_checkpoint_file(o.path, false, &datasets);
  Generator generator = [&] {
    try {
      Config config = Config::parse(meta.config, o.path + " (its config)");
      return Generator(config.section("model"), o.kv_cache);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("{}: {}", o.path, e.what()));
    }
  }();
  const std::int64_t numel = generator.param_layout().logical_elements();
  const auto params = std::find_if(datasets.begin(), datasets.end(), [](const auto& d) { return d.name == "params"; });
  RT_REQUIRE(params != datasets.end() && params->dims == std::vector<std::int64_t>{numel}, CheckpointMismatch,
             "{}: dataset 'params' should hold the {} parameters of its config's model: {}", o.path, numel,
             params == datasets.end() ? "missing" : fmt::format("[{}] found", fmt::join(params->dims, ", ")));
  read_checkpoint_params(ctx, o.path, generator.param_layout(), generator.params().f32());
  return generator;
}

std::vector<std::int32_t> prompt_of(const GenerateOptions& o, bool text_prompt, std::int64_t vocab) {
  std::vector<std::int32_t> tokens;
  if (text_prompt) {
    RT_REQUIRE(vocab >= kByteVocab, ConfigError,
               "--prompt: text is encoded with the byte tokenizer (ids 0-255) but the model's vocabulary is {}; give "
               "token ids with --prompt-tokens",
               vocab);
    for (const char c : o.prompt) tokens.push_back(static_cast<unsigned char>(c));
    return tokens;
  }
  for (std::size_t at = 0; at < o.prompt_tokens.size();) {
    const std::size_t end = std::min(o.prompt_tokens.find(',', at), o.prompt_tokens.size());
    const std::string_view word = std::string_view(o.prompt_tokens).substr(at, end - at);
    std::int64_t id = -1;
    const auto [stop, error] = std::from_chars(word.data(), word.data() + word.size(), id);
    RT_REQUIRE(error == std::errc() && stop == word.data() + word.size() && id >= 0 && id < vocab, ConfigError,
               "--prompt-tokens: '{}' is not a token id of the model's vocabulary [0, {})", word, vocab);
    tokens.push_back(static_cast<std::int32_t>(id));
    at = end + 1;
  }
  return tokens;
}

void generate(Context& ctx, const GenerateOptions& o, bool text_prompt, bool token_prompt) {
  RT_REQUIRE(ctx.world_size() == 1, CollectiveError,
             "generate runs on one process, not {} ranks: start it without mpirun (or with -np 1)", ctx.world_size());
  RT_REQUIRE(text_prompt || token_prompt, ConfigError,
             "generate: give the prompt as --prompt TEXT or --prompt-tokens IDS");
  const SamplingOptions sampling{o.temperature, o.top_k, o.seed};
  check_sampling_options(sampling);
  ctx.bind(Device::cpu, o.threads);
  Generator generator = load(ctx, o);
  const std::vector<std::int32_t> prompt = prompt_of(o, text_prompt, generator.vocab_size());
  std::function<void(std::int32_t)> stream;
  if (!o.json) {
    write_stdout(decode(prompt));
    stream = [](std::int32_t t) { write_stdout(decode({t})); };
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::int32_t> tokens = generator.generate(prompt, o.max_tokens, sampling, stream);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!o.json) {
    write_stdout("\n");
    return;
  }
  std::vector<std::int32_t> all = prompt;
  all.insert(all.end(), tokens.begin(), tokens.end());
  const nlohmann::json line = {{"prompt_tokens", prompt},
                               {"tokens", tokens},
                               {"text", decode(all)},
                               {"tokens_per_second", static_cast<double>(tokens.size()) / std::max(seconds, 1e-9)}};
  // JSON strings must be UTF-8: invalid bytes of "text" become U+FFFD (the ids are exact).
  log::info("{}", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace

Command add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "generate",
      "Continue a prompt with a trained GPT checkpoint (one process, CPU): the prompt and its continuation on stdout");
  auto o = std::make_shared<GenerateOptions>();
  cmd->add_option("checkpoint", o->path, "checkpoint file (.h5) of a model.family = \"gpt\" run")->required();
  auto* prompt = cmd->add_option("--prompt", o->prompt,
                                 "text to continue, encoded with the byte tokenizer (token = byte; the checkpoint does "
                                 "not record its tokenizer)");
  auto* ids = cmd->add_option("--prompt-tokens", o->prompt_tokens, "token ids to continue, comma-separated (1,2,3)")
                  ->excludes(prompt);
  prompt->excludes(ids);
  cmd->add_option("--max-tokens", o->max_tokens, "tokens to generate")
      ->required()
      ->default_str("")  // no default to show: it must be given
      ->check(number_in(std::int64_t{1}, std::int64_t{1} << 30));
  cmd->add_option("--temperature", o->temperature, "softmax temperature; 0: greedy (the most likely token)")
      ->check(number_in(0.0, 1e6));
  cmd->add_option("--top-k", o->top_k, "sample among the k most likely tokens only; 0: all")
      ->check(number_in(std::int64_t{0}, std::int64_t{1} << 31));
  cmd->add_option("--seed", o->seed, "sampling seed (the same seed, the same text)")
      ->check(number_at_least(std::uint64_t{0}));
  cmd->add_flag("--json", o->json, "one JSON line: prompt_tokens, tokens (the continuation), text, tokens_per_second");
  cmd->add_flag("!--no-kv-cache", o->kv_cache,
                "recompute the whole context for every token instead of caching keys and values (slower; the "
                "same tokens, a check)");
  cmd->add_option("--threads", o->threads, "compute threads (0: all cores)")->check(number_in(0, 4096));
  return [cmd, o](Context& ctx) {
    if (!cmd->parsed()) return 0;
    generate(ctx, *o, cmd->count("--prompt") > 0, cmd->count("--prompt-tokens") > 0);
    return 0;
  };
}

}  // namespace ringtrain
