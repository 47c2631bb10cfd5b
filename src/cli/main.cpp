// The ringtrain executable. Errors: ones all ranks agree on (CollectiveError) are printed
// once by rank 0 and end the job cleanly; any other error prints with its rank and aborts
// the whole job (MPI_Abort), so peers blocked in a collective never hang.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/version.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"

int main(int argc, char** argv) {
  std::unique_ptr<ringtrain::Context> ctx;
  try {
    ctx = std::make_unique<ringtrain::Context>(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringtrain: error: cannot start MPI: %s\n", e.what());
    return 1;
  }
  CLI::App app{"ringtrain: data-parallel deep-learning training for HPC clusters"};
  app.set_version_flag("--version", ringtrain::version());
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, ringtrain::Command>> commands;
  for (auto add : {ringtrain::add_train_command, ringtrain::add_data_command, ringtrain::add_bench_command,
                   ringtrain::add_ckpt_command, ringtrain::add_tune_command, ringtrain::add_doctor_command,
                   ringtrain::add_config_command}) {
    ringtrain::Command cmd = add(app);
    commands.emplace_back(app.get_subcommands({}).back(), std::move(cmd));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (ctx->world_rank() == 0) return app.exit(e);
    return e.get_exit_code();
  }
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run(*ctx);
  } catch (const ringtrain::CollectiveError& e) {
    if (ctx->world_rank() == 0) ringtrain::log::write_line(stderr, std::string("ringtrain: error: ") + e.what());
    return 1;
  } catch (const std::exception& e) {
    ringtrain::log::write_line(
        stderr,
        "ringtrain: error: " + (ctx->world_size() > 1 ? fmt::format("[rank {}] ", ctx->world_rank()) : "") + e.what());
    if (ctx->world_size() > 1) ctx->abort(1);
    return 1;
  }
  return 0;
}
