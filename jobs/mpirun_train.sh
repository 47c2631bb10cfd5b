#!/usr/bin/env bash
# Train with mpirun on this machine: jobs/mpirun_train.sh NP CONFIG.toml [--set key=value]...
# One rank per core (--bind-to core); ringtrain gives each rank its share of the cores.
set -euo pipefail
# shellcheck source=jobs/common/env.sh
source "$(dirname "$0")/common/env.sh"
rt_require_exe
np="${1:?usage: $0 NP CONFIG.toml [--set key=value]...}"
config="${2:?usage: $0 NP CONFIG.toml [--set key=value]...}"
shift 2
exec mpirun -np "$np" --bind-to core "$RINGTRAIN_EXE" train "$config" "$@"
