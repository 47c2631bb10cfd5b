// `ringtrain ckpt inspect FILE`: a checkpoint's metadata and datasets, with every checksum
// verified (exit status 1 and one error line naming the file for a damaged one).
#include <CLI/CLI.hpp>
#include <ctime>
#include <filesystem>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "ringtrain/ckpt/checkpoint.hpp"
#include "ringtrain/core/log.hpp"
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
  for (const auto& d : datasets)
    log::info("  /{:<24} [{}]  checksum {:016x}{}", d.name, fmt::join(d.dims, ", "), d.stored_checksum,
              d.verified ? "  ok" : "");
  log::info("{}", o.verify ? fmt::format("verified: all {} checksums match", datasets.size())
                           : std::string("not verified (--no-verify)"));
  if (o.config) log::info("config:\n{}", m.config);
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
  return [cmd, o](Context& ctx) {
    if (!cmd->parsed()) return 0;
    run_collectively(ctx, [&] {
      if (ctx.world_rank() == 0) inspect(*o);
    });
    return 0;
  };
}

}  // namespace ringtrain
