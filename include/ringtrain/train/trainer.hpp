// The training entry point behind `ringtrain train`: set-up (collective: config, data,
// model, optimizer), the data-parallel loop, per-epoch evaluation, run records.
#pragma once
#include <string>
#include <vector>

namespace ringtrain {

class Context;

// Runs a whole training as configured; every rank calls it. Throws CollectiveError for bad
// input (reported once), other Errors for failures on one rank.
void run_training(Context& ctx, const std::string& config_path, const std::vector<std::string>& overrides);

}  // namespace ringtrain
