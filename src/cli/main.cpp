// The ringtrain executable. Errors: ones all ranks agree on (CollectiveError) and usage
// errors (exit status 1, not CLI11's own codes) are printed once by rank 0 and end the job
// cleanly; any other error prints with its rank and aborts the whole job (MPI_Abort), so
// peers blocked in a collective never hang.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "hdf5/h5_close_state.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/version.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"
#include "ringtrain/runtime/slurm.hpp"

namespace {

// CLI11 shows an empty list's default as "=[]"; no default says the same more plainly.
void drop_empty_list_defaults(CLI::App& app) {
  for (CLI::Option* o : app.get_options())
    if (o->get_default_str() == "[]") o->default_str("");
  for (CLI::App* sub : app.get_subcommands({})) drop_empty_list_defaults(*sub);
}

// The subcommands the command line chose, outermost first.
std::vector<CLI::App*> chosen_path(CLI::App& app) {
  std::vector<CLI::App*> path;
  for (CLI::App* at = &app; !at->get_subcommands().empty();) path.push_back(at = at->get_subcommands().front());
  return path;
}

// One line for a usage error. A word where a subcommand belongs is named as an unknown
// subcommand (CLI11 says only that a subcommand is required, or that the word was not expected).
std::string usage_error(CLI::App& app, const CLI::ParseError& e) {
  const std::vector<CLI::App*> path = chosen_path(app);
  CLI::App& at = path.empty() ? app : *path.back();
  std::string command = "ringtrain";
  for (const CLI::App* sub : path) command += " " + sub->get_name();
  std::string message = e.what();
  const std::vector<std::string> rest = at.remaining();
  std::string names;
  for (const CLI::App* sub : at.get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
  if (!names.empty() && !rest.empty() && rest.front().rfind('-', 0) != 0)
    message = fmt::format("'{}' is not a subcommand of '{}' (one of: {})", rest.front(), command, names);
  else if (!names.empty() && rest.empty() && at.get_require_subcommand_min() > 0)
    message = fmt::format("'{}' needs a subcommand (one of: {})", command, names);
  return fmt::format("ringtrain: error: {}; run '{} --help' for usage", message, command);
}

// A command whose output did not all reach stdout (a full disk, /dev/full) failed: scripts take
// exit status 0 for "the output is all there" (generate, ckpt inspect and the benchmarks' JSON).
int stdout_status() {
  if (std::fflush(stdout) == 0 && std::ferror(stdout) == 0) return 0;
  ringtrain::log::write_line(stderr, fmt::format("ringtrain: error: stdout: write failed: {}", std::strerror(errno)));
  return 1;
}

int run_commands(ringtrain::Context& ctx, int argc, char** argv) {
  CLI::App app{"ringtrain: data-parallel deep-learning training for HPC clusters"};
  app.set_version_flag("--version", ringtrain::version());
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();  // --help shows each option's default
  std::vector<std::pair<CLI::App*, ringtrain::Command>> commands;
  for (auto add : {ringtrain::add_train_command, ringtrain::add_data_command, ringtrain::add_bench_command,
                   ringtrain::add_ckpt_command, ringtrain::add_tune_command, ringtrain::add_doctor_command,
                   ringtrain::add_config_command, ringtrain::add_generate_command}) {
    ringtrain::Command cmd = add(app);
    commands.emplace_back(app.get_subcommands({}).back(), std::move(cmd));
  }
  drop_empty_list_defaults(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version: printed by rank 0, exit status 0
    return ctx.world_rank() == 0 ? app.exit(e) : 0;
  } catch (const CLI::ParseError& e) {  // the same on every rank
    if (ctx.world_rank() == 0) ringtrain::log::write_line(stderr, usage_error(app, e));
    return 1;
  }
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) {
        const int status = run(ctx);
        return status == 0 ? stdout_status() : status;
      }
  } catch (const ringtrain::CollectiveError& e) {
    if (ctx.world_rank() == 0) ringtrain::log::write_line(stderr, std::string("ringtrain: error: ") + e.what());
    return 1;
  } catch (const std::exception& e) {
    // An allocation that failed outside an agreed phase (in a training step): say so, and where
    // (and what for, when the allocation knew).
    std::string what = e.what();
    if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
      what = fmt::format("out of memory (host {})", ringtrain::node_name());
      if (const auto* known = dynamic_cast<const ringtrain::HostOutOfMemory*>(&e)) what += " " + known->context();
    }
    ringtrain::log::write_line(
        stderr,
        "ringtrain: error: " + (ctx.world_size() > 1 ? fmt::format("[rank {}] ", ctx.world_rank()) : "") + what);
    if (ctx.world_size() > 1) ctx.abort(1);
    return 1;
  }
  return 0;
}

// The executable's work; main only adds a last line of defence for what escapes it (an
// allocation failure while the command line is built, say).
int run_ringtrain(int argc, char** argv) {
  std::unique_ptr<ringtrain::Context> ctx;
  try {
    ctx = std::make_unique<ringtrain::Context>(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringtrain: error: cannot start MPI: %s\n", e.what());
    return 1;
  }
  const int status = run_commands(*ctx, argc, argv);
  if (ringtrain::h5::a_file_close_failed()) {
    // Finalizing would run HDF5's termination, which crashes on that file: end here, the error
    // said (mpirun takes it as any rank that failed).
    std::fflush(nullptr);
    std::_Exit(status != 0 ? status : 1);
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run_ringtrain(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringtrain: error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "ringtrain: error: unknown exception\n");
  }
  return 1;
}
