// `ringtrain data convert`: IDX(.gz) images + labels -> HDF5; text (byte tokenizer) or token
// files (raw arrays, llm.c shards) -> token datasets. Rank 0 converts, the others wait.
#include <filesystem>
#include <CLI/CLI.hpp>
#include <fmt/ranges.h>
#include <optional>

#include "cli/commands.hpp"
#include "cli/number_checks.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/data/convert.hpp"
#include "ringtrain/data/token_convert.hpp"
#include "ringtrain/data/tokens.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"

namespace ringtrain {

namespace {

struct ConvertArgs {
  ConvertOptions idx;
  std::string classes = "none";
  TextConvertOptions text;
  TokensConvertOptions tokens;
  std::string dtype;
  std::string format = "auto";
};

// Exactly one input kind, with the options it needs; a usage error (exit 1) otherwise.
void check_mode(const CLI::App& convert) {
  const bool images = convert.count("--images") > 0, text = convert.count("--text") > 0,
             tokens = convert.count("--tokens") > 0;
  if (images + text + tokens != 1)
    throw CLI::ValidationError("give one input kind: --images with --labels, --text, or --tokens");
  auto need = [&](const char* option, const char* mode) {
    if (convert.count(option) == 0) throw CLI::RequiredError(fmt::format("{} (with {})", option, mode));
  };
  if (images) {
    need("--labels", "--images");
    need("--output", "--images");
  }
  if (text) need("--out-dir", "--text");
  if (tokens) {
    need("--vocab", "--tokens");
    need("--output", "--tokens");
  }
}

void convert_tokens(ConvertArgs& a) {
  if (!a.dtype.empty()) a.tokens.dtype = token_type_from_name(a.dtype);
  const std::optional<TokenFileFormat> format = token_file_format_from_name(a.format);
  RT_REQUIRE(format.has_value(), ConfigError, "data convert: unknown --format '{}' ({})", a.format,
             fmt::join(token_file_format_names(), ", "));
  a.tokens.format = *format;
  const TokenFileWritten w = convert_token_files(a.tokens);
  log::info("wrote {}: {} tokens ({}, vocabulary {}, tokenizer '{}')", w.path, w.tokens,
            sample_type_name(token_type_for_vocab(a.tokens.vocab_size)), a.tokens.vocab_size, a.tokens.tokenizer);
}

void convert_text(const ConvertArgs& a) {
  const TextConvertResult r = convert_text_to_tokens(a.text);
  log::info("wrote {}: {} tokens (uint8, vocabulary 256, tokenizer 'byte')", r.train.path, r.train.tokens);
  if (r.val) log::info("wrote {}: {} tokens", r.val->path, r.val->tokens);
  const std::string stale = (std::filesystem::path(a.text.out_dir) / "val.h5").string();
  if (!r.val && std::filesystem::exists(stale))
    log::warn("{}: left as it was, from an earlier conversion (--val-fraction 0 writes no val.h5)", stale);
}

void convert_idx(ConvertArgs& a) {
  if (a.classes == "fashion-mnist") a.idx.class_names = fashion_mnist_classes();
  const ConvertResult r = convert_idx_to_hdf5(a.idx);
  std::string shape;
  for (auto d : r.sample_shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  log::info("wrote {}: {} samples of [{}]", a.idx.output_path, r.samples, shape);
}

}  // namespace

Command add_data_command(CLI::App& app) {
  auto* data = app.add_subcommand("data", "Dataset tools");
  data->require_subcommand(1);
  auto* convert = data->add_subcommand(
      "convert",
      "Convert to HDF5: IDX(.gz) images and labels (--images, --labels, -o); text through the byte tokenizer "
      "(--text, --out-dir: train.h5 and val.h5); or token files made elsewhere, raw little-endian arrays or llm.c "
      "shards (--tokens, --vocab, -o)");
  auto a = std::make_shared<ConvertArgs>();
  convert->add_option("--images", a->idx.images_path, "IDX(.gz) images [N,H,W] or [N,C,H,W]");
  convert->add_option("--labels", a->idx.labels_path, "IDX(.gz) labels [N]");
  convert->add_option("-o,--output", a->idx.output_path, "HDF5 file to write (--images, --tokens)");
  convert->add_option("--classes", a->classes, "class names to store: fashion-mnist or none")
      ->check(CLI::IsMember({"fashion-mnist", "none"}));
  convert->add_option("--chunk", a->idx.chunk_samples, "samples per HDF5 chunk (--images)")
      ->check(number_at_least(std::int64_t{1}));
  convert->add_option("--text", a->text.inputs, "text files or globs, concatenated in this order (byte tokenizer)");
  convert->add_option("--out-dir", a->text.out_dir, "directory for train.h5 and val.h5 (--text)");
  convert->add_option("--val-fraction", a->text.val_fraction, "the last fraction of the bytes, held out as val.h5")
      ->check(number_in<double>(0.0, 1.0, [](double f) {
                return f < 1.0 ? std::string() : "1 would hold out every byte (must be below 1)";
              }).description("FLOAT in [0 - 1)"));
  convert->add_option("--tokens", a->tokens.inputs, "token files or globs, concatenated in this order");
  convert->add_option("--dtype", a->dtype, "element type of raw token files (llm.c shards are uint16)")
      ->check(CLI::IsMember({"uint8", "uint16", "uint32"}));
  convert->add_option("--vocab", a->tokens.vocab_size, "vocabulary size: every token must be below it")
      ->check(number_in(std::int64_t{1}, kMaxVocabSize))
      ->default_str("");
  convert->add_option("--tokenizer", a->tokens.tokenizer, "tokenizer name stored with the tokens (e.g. gpt2)");
  convert
      ->add_option("--format", a->format,
                   "token file format: llmc (256 x int32 header, magic 20240520), raw, or "
                   "auto (llmc when the file starts with the magic)")
      ->check(CLI::IsMember(token_file_format_names()));
  convert->parse_complete_callback([convert] { check_mode(*convert); });
  return [convert, a](Context& ctx) {
    if (!convert->parsed()) return 0;
    run_collectively(ctx, [&] {
      if (ctx.world_rank() != 0) return;
      a->tokens.output_path = a->idx.output_path;
      if (!a->tokens.inputs.empty()) {
        convert_tokens(*a);
      } else if (!a->text.inputs.empty()) {
        convert_text(*a);
      } else {
        convert_idx(*a);
      }
    });
    return 0;
  };
}

}  // namespace ringtrain
