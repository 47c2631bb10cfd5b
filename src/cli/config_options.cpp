// The command-line options that change a run's config, shared by every subcommand that reads
// one (train, bench train, tune batch): --set KEY=VALUE and --unset KEY.
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "ringtrain/core/config.hpp"

namespace ringtrain {

void add_config_overrides(CLI::App& cmd, ConfigOverrides& overrides) {
  cmd.add_option("--set", overrides.set,
                 "override a config key; VALUE is TOML (quote strings that look like dates or numbers: "
                 "--set run.dir='\"2026-12-01\"'), a bare word is a string; [[model.layers]] by index: "
                 "--set model.layers[1].out=128 (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  cmd.add_option("--unset", overrides.unset, "drop a key of the config file (its default applies; repeatable)")
      ->type_name("KEY")
      ->allow_extra_args(false);
}

}  // namespace ringtrain
