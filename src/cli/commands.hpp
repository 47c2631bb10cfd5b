// Private: the ringtrain subcommands, each registered on the CLI11 app and run after parsing.
#pragma once
#include <functional>

namespace CLI {
class App;
}

namespace ringtrain {

class Context;
struct ConfigOverrides;
using Command = std::function<int(Context&)>;  // returns the exit status

// Each adds its subcommand to `app` and returns the action to run when it was chosen.
Command add_train_command(CLI::App& app);
Command add_data_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_ckpt_command(CLI::App& app);
Command add_doctor_command(CLI::App& app);
Command add_tune_command(CLI::App& app);
Command add_config_command(CLI::App& app);
Command add_generate_command(CLI::App& app);

// --set KEY=VALUE and --unset KEY, collected into `overrides` (which must outlive parsing).
void add_config_overrides(CLI::App& cmd, ConfigOverrides& overrides);

}  // namespace ringtrain
