// `ringtrain train CONFIG.toml [--set key=value]... [--unset key]...`
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/train/trainer.hpp"

namespace ringtrain {

Command add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a model as a TOML config describes (run under mpirun or srun)");
  auto config = std::make_shared<std::string>();
  auto overrides = std::make_shared<ConfigOverrides>();
  cmd->add_option("config", *config, "run configuration (TOML)")->required();
  add_config_overrides(*cmd, *overrides);
  return [config, overrides](Context& ctx) { return run_training(ctx, *config, *overrides); };
}

}  // namespace ringtrain
