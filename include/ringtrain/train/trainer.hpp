// The training entry point behind `ringtrain train`: set-up (collective: config, data,
// model, optimizer), the data-parallel loop, per-epoch evaluation, run records.
#pragma once
#include <string>
#include <vector>

namespace ringtrain {

class Context;
struct ConfigOverrides;

// The exit status of a run that stopped before its end with a checkpoint to continue from
// (SIGTERM/SIGUSR1, train.exit_at_step): EX_TEMPFAIL, "try again": resume with
// train.resume = "auto". Job scripts requeue on it.
inline constexpr int kExitResumable = 75;

// Runs a training as configured; every rank calls it. Returns 0 when the training is complete,
// kExitResumable when it stopped early with a checkpoint. Throws CollectiveError for bad
// input (reported once), other Errors for failures on one rank.
int run_training(Context& ctx, const std::string& config_path, const ConfigOverrides& overrides);

}  // namespace ringtrain
