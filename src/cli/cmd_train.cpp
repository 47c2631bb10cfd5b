// `ringtrain train CONFIG.toml [--set key=value]...`
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "ringtrain/train/trainer.hpp"

namespace ringtrain {

Command add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a model as a TOML config describes (run under mpirun or srun)");
  auto config = std::make_shared<std::string>();
  auto sets = std::make_shared<std::vector<std::string>>();
  cmd->add_option("config", *config, "run configuration (TOML)")->required();
  cmd->add_option("--set", *sets, "override a config key, e.g. --set train.epochs=3 (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  return [config, sets](Context& ctx) { return run_training(ctx, *config, *sets); };
}

}  // namespace ringtrain
