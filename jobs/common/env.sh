# Shared by every job script: where ringtrain is, and the launcher settings Open MPI needs.
RINGTRAIN_ROOT="${RINGTRAIN_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
RINGTRAIN_EXE="${RINGTRAIN_EXE:-$RINGTRAIN_ROOT/build/src/cli/ringtrain}"
if [ ! -x "$RINGTRAIN_EXE" ]; then
  echo "ringtrain: error: $RINGTRAIN_EXE not found; build first (tools/quickstart or cmake --build build)" >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
