// `ringtrain config keys [--markdown]`: every config key with its type, default, allowed values
// and meaning, from the one declaration each key has; the README's table is this output.
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "ringtrain/core/config_key.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/runtime/context.hpp"

namespace ringtrain {
namespace {

void print_keys(bool markdown) {
  if (markdown) {
    std::fputs(config_keys_markdown().c_str(), stdout);
    return;
  }
  for (const KeyInfo* k : registered_keys()) {
    std::string line = fmt::format("{} ({}", k->name, key_type_name(k->type));
    if (!k->allowed.empty()) line += "; " + k->allowed;
    line += "; default " + k->default_text + ")";
    if (!k->read_when.key.empty()) line += " [read when " + k->read_when.key + " is one of the listed values]";
    std::fputs(fmt::format("{}\n    {}\n", line, k->doc).c_str(), stdout);
  }
}

}  // namespace

Command add_config_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("config", "What a run's config may hold");
  cmd->require_subcommand(1);
  auto* keys = cmd->add_subcommand("keys", "Every config key: type, default, allowed values, meaning");
  auto markdown = std::make_shared<bool>(false);
  keys->add_flag("--markdown", *markdown, "the markdown table (as in README.md)");
  return [keys, markdown](Context& ctx) {
    if (keys->parsed() && ctx.world_rank() == 0) print_keys(*markdown);
    return 0;
  };
}

}  // namespace ringtrain
