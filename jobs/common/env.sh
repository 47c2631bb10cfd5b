# shellcheck shell=bash disable=SC2034  # variables here are used by the scripts that source it
# Shared by every job script (sourced): where ringtrain is, the environment the launchers
# need (Open MPI, threads, NCCL/UCX) and the helpers that make a job fail loudly: a launch
# that fails, or that "succeeds" without ringtrain's final line, fails the job.
#
# Site modules: load what your site provides here or before sbatch (placeholders; the names
# differ from site to site, nothing below depends on them):
#   module load gcc/12 openmpi/4.1 hdf5/1.10-openmpi openblas
#   module load cuda/13.0 nccl/2.28        # GPU nodes

RINGTRAIN_ROOT="${RINGTRAIN_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
RT_JOB="${RT_JOB:-$(basename "$0")}"  # the script's name, for messages
RT_USAGE="${RT_USAGE:-CONFIG.toml [--set key=value]...}"  # its arguments, for messages

if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Containers often forbid the cross-process memory attach Open MPI tries first.
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
# Threads: ringtrain sizes its own BLAS pool (runtime.threads; 0 = the node's cores split
# among its ranks); OpenMP pools elsewhere get the task's CPUs, not the whole node.
if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$SLURM_CPUS_PER_TASK}"
fi
# NCCL (GPU runs): warnings only. Interfaces and HCAs are site specific, e.g.
#   export NCCL_SOCKET_IFNAME=ib0 NCCL_IB_HCA=mlx5
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
# UCX (Open MPI's InfiniBand transport): quiet about unused variables. Site specific, e.g.
#   export UCX_NET_DEVICES=mlx5_0:1
export UCX_WARN_UNUSED_ENV_VARS="${UCX_WARN_UNUSED_ENV_VARS:-n}"

rt_say() { echo "$RT_JOB: $*"; }
rt_die() {
  echo "$RT_JOB: error: $*" >&2
  exit 1
}

# Job scripts run only inside an allocation (sbatch, or salloc for a try by hand).
rt_require_slurm() {
  [ -n "${SLURM_JOB_ID:-}" ] ||
    rt_die "not inside a Slurm job (SLURM_JOB_ID is unset): submit it with sbatch [options] jobs/$RT_JOB $RT_USAGE"
}

# RINGTRAIN_EXE, else the default build, else (jobs installed in P/share/ringtrain) P/bin's,
# else `ringtrain` on PATH.
rt_require_exe() {
  local default="$RINGTRAIN_ROOT/build/src/cli/ringtrain"
  local installed="$RINGTRAIN_ROOT/../../bin/ringtrain"
  if [ -z "${RINGTRAIN_EXE:-}" ]; then
    if [ -x "$default" ]; then
      RINGTRAIN_EXE="$default"
    elif [[ "$RINGTRAIN_ROOT" == */share/ringtrain ]] && [ -x "$installed" ]; then
      RINGTRAIN_EXE="$(cd "$(dirname "$installed")" && pwd)/ringtrain"
    elif command -v ringtrain >/dev/null 2>&1; then
      RINGTRAIN_EXE="$(command -v ringtrain)"
    fi
  fi
  if [ -z "${RINGTRAIN_EXE:-}" ] || [ ! -x "$RINGTRAIN_EXE" ]; then
    rt_die "ringtrain executable not found (${RINGTRAIN_EXE:-$default}): build it (tools/quickstart) or set RINGTRAIN_EXE"
  fi
  export RINGTRAIN_EXE
}

# RINGTRAIN_SET: key=value words separated by blanks, quoted as in a shell where a value has
# blanks or quotes (RINGTRAIN_SET="run.dir='/scratch/my run' train.epochs=3"); xargs splits
# them, so nothing is expanded or globbed (a '*' or '$' stays as written). Appends a --set per
# word to RT_OVERRIDES.
rt_set_overrides() {
  local words kv
  if ! words="$(printf '%s' "${RINGTRAIN_SET:-}" | xargs -r printf '%s\n' 2>&1)"; then
    words="${words#xargs: }"
    rt_die "RINGTRAIN_SET cannot be split into words (${words%%;*}): quote a value with blanks as key='a b'"
  fi
  while IFS= read -r kv; do
    if [ -n "$kv" ]; then RT_OVERRIDES+=(--set "$kv"); fi
  done <<<"$words"
}

# RT_CONFIG (absolute) from the first argument or RINGTRAIN_CONFIG; RT_OVERRIDES from
# RINGTRAIN_SET (see rt_set_overrides) and then the remaining arguments ("--set key=value" or
# just "key=value"), so arguments win. Call as: rt_parse_train_args "$@".
rt_parse_train_args() {
  local config="${RINGTRAIN_CONFIG:-}"
  if [ $# -gt 0 ] && [[ "$1" != -* ]] && [[ "$1" != *=* ]]; then
    config="$1"
    shift
  fi
  [ -n "$config" ] || rt_die "no config given: sbatch jobs/$RT_JOB $RT_USAGE (or RINGTRAIN_CONFIG)"
  [ -f "$config" ] || rt_die "config file not found: $config (relative paths start at $(pwd))"
  RT_CONFIG="$(cd "$(dirname "$config")" && pwd)/$(basename "$config")"
  RT_OVERRIDES=()
  rt_set_overrides
  while [ $# -gt 0 ]; do
    case "$1" in
      --set)
        [ $# -ge 2 ] || rt_die "--set needs key=value"
        RT_OVERRIDES+=(--set "$2")
        shift 2
        ;;
      --set=*) RT_OVERRIDES+=(--set "${1#--set=}") && shift ;;
      -*) RT_OVERRIDES+=("$1") && shift ;;
      *=*) RT_OVERRIDES+=(--set "$1") && shift ;;
      *) rt_die "unexpected argument '$1' (overrides are key=value or --set key=value)" ;;
    esac
  done
}

# The allocation as Slurm resolved it, one line.
rt_print_job() {
  local array=""
  [ -n "${SLURM_ARRAY_JOB_ID:-}" ] && array=" (array ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID:-?})"
  rt_say "job ${SLURM_JOB_ID}${array} '${SLURM_JOB_NAME:-}' | ${SLURM_JOB_NUM_NODES:-?} node(s): ${SLURM_JOB_NODELIST:-?}" \
    "| tasks ${SLURM_NTASKS:-one per node} (per node: ${SLURM_TASKS_PER_NODE:-?}) | cpus/task ${SLURM_CPUS_PER_TASK:-1}" \
    "| gpus ${SLURM_JOB_GPUS:-${SLURM_GPUS:-none}} | restart ${SLURM_RESTART_COUNT:-0} | dir $(pwd)"
}

# Signals that reach the batch shell: USR1 (sbatch --signal=B:USR1@N, or scancel
# --signal=USR1 --batch) is passed to the launcher, which passes it to every rank (ringtrain
# checkpoints and exits 75). srun drops a signal that comes before its tasks exist and a rank
# dies of one that comes before ringtrain handles it, so a USR1 is held until ringtrain's first
# line ("ringtrain VERSION | N ranks on ...", printed once every rank handles the signal) is in
# its output: one that comes before the launch, or before the launcher's PID is known, is not
# lost. TERM is only noted: Slurm sends it to the ranks itself, and a job being cancelled must
# not requeue itself.
RT_LAUNCH_PID=""
RT_GOT_USR1=0  # a USR1 came (at any time)
RT_HELD_USR1=0 # ... and is not passed on yet
RT_READY=0     # ringtrain's first line is in $RT_LOG
RT_GOT_TERM=0
rt_on_usr1() {
  RT_GOT_USR1=1
  RT_HELD_USR1=1
  rt_say "SIGUSR1: asking ringtrain to checkpoint and stop"
  rt_pass_usr1
}
rt_on_term() {
  RT_GOT_TERM=1
  rt_say "SIGTERM: the job is ending; waiting for ringtrain to stop"
}
trap rt_on_usr1 USR1
trap rt_on_term TERM

# Sets RT_READY once ringtrain's first line is in the launch's output.
rt_note_ready() {
  if [ "$RT_READY" -eq 0 ] && [ -n "${RT_LOG:-}" ] && grep -q -m 1 '^ringtrain [^ ]* | [0-9]* ranks\{0,1\} on ' "$RT_LOG"; then
    RT_READY=1
  fi
}

# Passes a held USR1 to the launcher once ringtrain is ready for it.
rt_pass_usr1() {
  rt_note_ready
  if [ "$RT_HELD_USR1" -eq 1 ] && [ "$RT_READY" -eq 1 ] && [ -n "$RT_LAUNCH_PID" ]; then
    RT_HELD_USR1=0
    kill -USR1 "$RT_LAUNCH_PID" 2>/dev/null || true
  fi
}

# Runs a launcher command (srun/mpirun ...); its output goes to the job's output and to
# $RT_LOG. Sets RT_STATUS to the launcher's exit status; never exits the script itself.
# A launch that dies of a signal (status above 128) before ringtrain's first line, with no
# signal sent to the job, is launched once more: nothing was computed or written yet, and
# such deaths come from the MPI library's start-up (docs/RELIABILITY.md: a rank's SIGSEGV
# inside Open MPI 4.1.4's MPI_Init over TCP). A benchmark, which prints no such line, is
# launched once more after any death by a signal. Never a third time.
rt_launch() {
  rt_launch_once "$@"
  if rt_died_starting; then
    rt_say "the launch died of a signal (exit status $RT_STATUS) before ringtrain's first line: nothing was" \
      "computed or written yet; launching once more"
    rt_launch_once "$@"
    if rt_died_starting; then rt_say "the launch died of a signal before ringtrain's first line again: giving up"; fi
  fi
}

# Whether the last launch died of a signal before ringtrain's first line, and no signal
# reached the job (a job being cancelled, timed out or preempted is never relaunched).
rt_died_starting() {
  rt_note_ready
  [ "$RT_STATUS" -gt 128 ] && [ "$RT_READY" -eq 0 ] && [ "$RT_GOT_TERM" -eq 0 ] && [ "$RT_GOT_USR1" -eq 0 ]
}

# One launch, as rt_launch describes. The log and the pipe to tee live in a private directory
# (mktemp -d), removed when the script exits, also on an error or a signal.
rt_launch_once() {
  rt_say "launch: $*"
  if [ -z "${RT_TMP:-}" ]; then
    RT_TMP="$(mktemp -d "${TMPDIR:-/tmp}/ringtrain-job-${SLURM_JOB_ID:-0}.XXXXXX")" ||
      rt_die "cannot create a temporary directory in ${TMPDIR:-/tmp}"
    trap 'rm -rf "$RT_TMP"' EXIT
  fi
  RT_LOG="$RT_TMP/output.log"
  local fifo="$RT_TMP/output.fifo" tee_pid
  rm -f "$fifo"
  mkfifo "$fifo"
  # The log exists before tee opens it (only once the launcher opens the pipe): the polling
  # below reads it from the start.
  : >"$RT_LOG"
  tee "$RT_LOG" <"$fifo" &
  tee_pid=$!
  RT_READY=0
  "$@" >"$fifo" 2>&1 &
  RT_LAUNCH_PID=$!
  # A trapped signal ends `wait` early while the launcher runs on: wait again. Until ringtrain
  # is ready, poll instead, so that a USR1 held meanwhile is passed on as soon as it can be.
  while kill -0 "$RT_LAUNCH_PID" 2>/dev/null; do
    rt_pass_usr1
    if [ "$RT_READY" -eq 1 ]; then wait "$RT_LAUNCH_PID" || true; else sleep 0.2; fi
  done
  RT_STATUS=0
  wait "$RT_LAUNCH_PID" || RT_STATUS=$?
  RT_LAUNCH_PID=""
  wait "$tee_pid" || true
}

# After a training launch: exit status 0 alone is not trusted (a failed step can still
# report 0), ringtrain's "done: ... -> DIR/summary.json" line and that file must exist (or,
# resuming, its word that the checkpoint is already at the end). Sets RT_SUMMARY.
rt_require_done() {
  [ "$RT_STATUS" -eq 0 ] || rt_die "the launch failed (exit status $RT_STATUS); see ringtrain's messages above"
  RT_SUMMARY="$(sed -n 's/^done: .* -> \(.*\/summary\.json\)$/\1/p' "$RT_LOG" | tail -n 1)"
  if [ -z "$RT_SUMMARY" ] && grep -q '^resume: .*this run is already complete' "$RT_LOG"; then
    rt_say "finished: the newest checkpoint is already at the last step (an earlier run of this job completed it)"
    return 0
  fi
  [ -n "$RT_SUMMARY" ] || rt_die "the launch exited 0 but ringtrain did not finish (no 'done:' line in its output)"
  [ -f "$RT_SUMMARY" ] || rt_die "ringtrain reported $RT_SUMMARY but the file does not exist"
  rt_say "finished: $RT_SUMMARY"
}

# A word as a shell reads it back: as it is when it holds only safe characters, else in single
# quotes.
rt_quote() {
  local q="'\\''"
  if [[ "$1" =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then printf '%s' "$1"; else printf "'%s'" "${1//\'/$q}"; fi
}

# After a stop with a checkpoint (exit 75): the sbatch command, quoted for a shell, that
# continues the same run: this script on as many nodes and tasks, the config and the overrides
# (except run.dir and train.resume), then the stopped run's run.dir (a new job's default would
# be runs/<config>-<its own id>, empty) and train.resume=auto. The run.dir comes from a line
# ringtrain prints at the start, "config: FILE (resolved below; also in DIR/config.toml)": its
# last lines can be cut off when Slurm ends the step (scancel). Fails when that line is missing.
rt_continue_command() {
  local dir i words=()
  dir="$(sed -n 's/^config: .* (resolved below; also in \(.*\)\/config\.toml)$/\1/p' "$RT_LOG" | tail -n 1)"
  [ -n "$dir" ] || return 1
  [[ "$dir" == /* ]] || dir="$(pwd)/$dir"
  words=(sbatch -N "${SLURM_JOB_NUM_NODES:-1}")
  if [ -n "${SLURM_NTASKS_PER_NODE:-}" ]; then
    words+=("--ntasks-per-node=$SLURM_NTASKS_PER_NODE")
  else
    words+=(-n "${SLURM_NTASKS:-1}")
  fi
  [ -n "${SLURM_CPUS_PER_TASK:-}" ] && words+=("--cpus-per-task=$SLURM_CPUS_PER_TASK")
  [ -n "${SLURM_GPUS_PER_TASK:-}" ] && words+=("--gpus-per-task=$SLURM_GPUS_PER_TASK")
  words+=("$RINGTRAIN_ROOT/jobs/$RT_JOB" "$RT_CONFIG")
  for ((i = 0; i < ${#RT_OVERRIDES[@]}; i++)); do
    [ "${RT_OVERRIDES[i]}" = --set ] && i=$((i + 1))
    [[ "${RT_OVERRIDES[i]}" == run.dir=* || "${RT_OVERRIDES[i]}" == train.resume=* ]] || words+=("${RT_OVERRIDES[i]}")
  done
  words+=("run.dir=$dir" train.resume=auto)
  for i in "${!words[@]}"; do
    [ "$i" -gt 0 ] && printf ' '
    rt_quote "${words[i]}"
  done
}

# Ends a training job that ringtrain stopped with a checkpoint (exit 75): "MESSAGE; continue
# with: COMMAND". Call as: rt_die_stopped MESSAGE.
rt_die_stopped() {
  local command
  command="$(rt_continue_command)" ||
    rt_die "$1, but its output has no 'config: ... also in DIR/config.toml' line: continue with run.dir=DIR train.resume=auto"
  rt_die "$1; continue with: $command"
}

# A top-level number from summary.json (written by ringtrain with one key per line, indented
# by two spaces at the top level; nested objects such as "resources" repeat some key names).
rt_summary_value() {
  sed -n "s/^  \"$2\": \([^,]*\),\{0,1\}$/\1/p" "$1"
}

# The srun line every script uses: PMIx (Open MPI 4.1), the whole step ends when one rank
# fails. RINGTRAIN_SRUN_FLAGS adds site flags, e.g. "--gpu-bind=closest --cpu-bind=cores".
rt_srun() {
  # shellcheck disable=SC2086
  rt_launch srun --mpi=pmix --kill-on-bad-exit=1 ${RINGTRAIN_SRUN_FLAGS:-} "$@"
}
