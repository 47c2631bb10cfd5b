// `ringtrain ckpt inspect FILE`: a checkpoint's metadata and datasets, with every checksum
// verified and the algorithm named (exit status 1 and one error line naming the file for a
// damaged one).
// `ringtrain ckpt export FILE --format safetensors -o OUT`: a GPT checkpoint's parameters under
// HuggingFace GPT-2's names (the model rebuilt on the CPU from the config the checkpoint holds).
#include <CLI/CLI.hpp>
#include <ctime>
#include <filesystem>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "ringtrain/ckpt/checkpoint.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/files.hpp"
#include "ringtrain/nn/gpt_safetensors.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"

namespace ringtrain {
namespace {

struct InspectOptions {
  std::string path;
  bool verify = true;
  bool json = false;
  bool config = false;
};

std::string utc(double unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

void inspect(const InspectOptions& o) {
  std::vector<CheckpointDataset> datasets;
  const CheckpointMeta m = inspect_checkpoint_file(o.path, o.verify, &datasets);
  if (o.json) {
    nlohmann::json d = nlohmann::json::array();
    for (const auto& x : datasets)
      d.push_back({{"name", x.name},
                   {"dims", x.dims},
                   {"checksum", fmt::format("{:016x}", x.stored_checksum)},
                   {"verified", x.verified}});
    log::info("{}", nlohmann::json{{"path", o.path},
                                   {"format", kCheckpointFormat},
                                   {"format_version", m.format_version},
                                   {"ringtrain_version", m.ringtrain_version},
                                   {"step", m.step},
                                   {"epoch", m.epoch},
                                   {"step_in_epoch", m.step_in_epoch},
                                   {"global_batch", m.global_batch},
                                   {"seed", m.seed},
                                   {"world_size", m.world_size},
                                   {"optimizer", m.optimizer},
                                   {"optimizer_steps", m.optimizer_steps},
                                   {"data_strategy", m.data_strategy},
                                   {"precision", m.precision},
                                   {"loss_scale", m.loss_scale},
                                   {"loss_scale_good_steps", m.loss_scale_good_steps},
                                   {"skipped_steps", m.skipped_steps},
                                   {"wall_time", m.wall_time},
                                   {"checksum_algorithm", m.checksum_algorithm},
                                   {"meta_checksum", m.format_version >= 2
                                                         ? nlohmann::json(fmt::format("{:016x}", m.meta_checksum))
                                                         : nlohmann::json(nullptr)},
                                   {"datasets", d}}
                        .dump());
    return;
  }
  log::info("checkpoint: {} ({:.1f} MB)", o.path, static_cast<double>(std::filesystem::file_size(o.path)) / 1e6);
  log::info("format:     {} v{}, written by ringtrain {} on {} rank{} at {}", kCheckpointFormat, m.format_version,
            m.ringtrain_version, m.world_size, m.world_size == 1 ? "" : "s", utc(m.wall_time));
  log::info("position:   step {} (next: epoch {}, step {}), global batch {}, seed {}", m.step, m.epoch + 1,
            m.step_in_epoch + 1, m.global_batch, m.seed);
  log::info("state:      optimizer {} ({} steps taken), data strategy {}", m.optimizer, m.optimizer_steps,
            m.data_strategy);
  log::info("precision:  {}{}", m.precision,
            m.precision == "fp16"
                ? fmt::format(", loss scale {:g} ({} clean steps since it last changed), {} steps skipped",
                              m.loss_scale, m.loss_scale_good_steps, m.skipped_steps)
                : std::string());
  log::info("checksums:  {}; metadata {}", m.checksum_algorithm,
            m.format_version >= 2 ? fmt::format("checksum {:016x}  ok", m.meta_checksum)
                                  : std::string("not checksummed (format version 1)"));
  for (const auto& d : datasets)
    log::info("  /{:<24} [{}]  checksum {:016x}{}", d.name, fmt::join(d.dims, ", "), d.stored_checksum,
              d.verified ? "  ok" : "");
  log::info("{}", o.verify ? fmt::format("verified: all {} checksums match", datasets.size())
                           : std::string("not verified (--no-verify)"));
  if (o.config) log::info("config:\n{}", m.config);
}

struct ExportOptions {
  std::string path;
  std::string format;
  std::string out;
};

// Collective (the parameters are read on every rank); rank 0 writes the file.
void export_checkpoint(const Context& ctx, const ExportOptions& o) {
  std::unique_ptr<Config> config;
  std::unique_ptr<Model> model;
  std::string out;
  run_collectively(ctx, [&] {
    out = output_file(o.out);
    std::vector<CheckpointDataset> datasets;
    config = std::make_unique<Config>(Config::parse(inspect_checkpoint_file(o.path, false, &datasets).config, o.path));
    Config model_config = config->section("model");
    const std::int64_t block_size = model_block_size(model_config);
    RT_REQUIRE(block_size > 0, ConfigError,
               "ckpt export: {}: the model is not a GPT (model.family = \"gpt\"): only GPTs export to {}", o.path,
               o.format);
    model = build_model(model_config, Shape{block_size});
    const auto params =
        std::find_if(datasets.begin(), datasets.end(), [](const auto& d) { return d.name == "params"; });
    RT_REQUIRE(params != datasets.end() && params->dims == std::vector<std::int64_t>{model->num_params()},
               CheckpointMismatch,
               "ckpt export: {}: dataset 'params' does not hold the {} parameters of its config's model", o.path,
               model->num_params());
  });
  read_checkpoint_params(ctx, o.path, model->param_layout(), model->params().f32());
  run_collectively(ctx, [&] {
    if (ctx.world_rank() != 0) return;
    Config model_config = config->section("model");
    export_gpt_safetensors(model_config, *model, out);
    log::info("export: {} -> {} ({}, {} tensors, {} parameters, {:.1f} MB)", o.path, out, o.format,
              model->param_tensors().size(), model->num_params(),
              static_cast<double>(std::filesystem::file_size(out)) / 1e6);
  });
}

}  // namespace

Command add_ckpt_command(CLI::App& app) {
  auto* ckpt = app.add_subcommand("ckpt", "Checkpoint tools");
  ckpt->require_subcommand(1);
  auto* cmd = ckpt->add_subcommand("inspect", "Print a checkpoint's metadata and verify its checksums");
  auto o = std::make_shared<InspectOptions>();
  cmd->add_option("file", o->path, "checkpoint file (.h5)")->required();
  cmd->add_flag("!--no-verify", o->verify, "skip reading the data to verify checksums");
  cmd->add_flag("--json", o->json, "one JSON object instead of text");
  cmd->add_flag("--config", o->config, "also print the run's resolved config");
  auto* exp = ckpt->add_subcommand("export", "Write a GPT checkpoint's parameters as safetensors (GPT-2's names)");
  auto e = std::make_shared<ExportOptions>();
  exp->add_option("file", e->path, "checkpoint file (.h5)")->required();
  exp->add_option("--format", e->format, "output format")->required()->check(CLI::IsMember({"safetensors"}));
  exp->add_option("-o,--output", e->out, "output file (.safetensors), written atomically")->required();
  return [cmd, o, exp, e](Context& ctx) {
    if (exp->parsed()) export_checkpoint(ctx, *e);
    if (cmd->parsed())
      run_collectively(ctx, [&] {
        if (ctx.world_rank() == 0) inspect(*o);
      });
    return 0;
  };
}

}  // namespace ringtrain
