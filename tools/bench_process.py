"""Shared by the side-by-side benchmark drivers (tools/bench_vs_pytorch.py,
tools/bench_gpt_vs_pytorch.py): running a command with a timeout that kills its whole process
group, logging, finding a result's JSON line in a command's output, the PyTorch venv and its
probe, ringtrain's mpirun line and environment, the `bench gemm` peak, and median/min/max
summaries. Stdlib only.
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class RunFailed(Exception):
    pass


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def tail(text, n=40):
    lines = (text or "").rstrip().splitlines()
    return "\n".join(lines[-n:])


def run_cmd(cmd, timeout, env=None, what=None):
    """Run cmd in its own session; on timeout kill the whole process group. Returns (stdout, stderr)."""
    what = what or " ".join(cmd)
    log(f"$ {' '.join(cmd)}")
    t0 = time.monotonic()
    try:
        p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    except OSError as e:
        raise RunFailed(f"{what}: cannot start: {e}")
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
        raise RunFailed(f"{what}: timed out after {timeout:.0f} s\n--- stderr tail ---\n{tail(err)}"
                        f"\n--- stdout tail ---\n{tail(out, 10)}")
    except BaseException:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        raise
    log(f"  ({time.monotonic() - t0:.1f} s, exit {p.returncode})")
    if p.returncode != 0:
        raise RunFailed(f"{what}: exit status {p.returncode}\n--- stderr tail ---\n{tail(err)}"
                        f"\n--- stdout tail ---\n{tail(out, 10)}")
    return out, err


def last_json_line(text, key):
    for line in reversed((text or "").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if key in obj:
                return obj
    return None


def human(nbytes):
    """A byte count as people write it: "256 KiB", "64 MiB", "1000 B"."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def write_runs(args, runs):
    """Every run's results and the options, to args.out when given (--out FILE.json)."""
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"config": vars(args), "runs": runs}, f, indent=1)


def default_venv():
    """tools/setup-torch-venv's venv directory."""
    return os.environ.get("RINGTRAIN_TORCH_VENV") or os.path.join(
        os.path.expanduser("~"), ".cache", "ringtrain", "torch-venv")


def probe_torch(python, timeout):
    """torch's version if `python` can import torch, h5py and numpy, else None."""
    try:
        p = subprocess.run([python, "-c", "import torch, h5py, numpy; print(torch.__version__)"],
                           capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0 or not p.stdout.strip():
        return None
    return p.stdout.strip().splitlines()[-1]


def ringtrain_env():
    env = dict(os.environ)
    env.pop("OPENBLAS_NUM_THREADS", None)  # ringtrain sets its own threads
    if os.getuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    # containers often forbid the cross-process memory attach Open MPI tries first (tools/env.sh)
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    return env


def threads_per_rank(args):
    """Compute threads per rank: the scripts' --threads (torch threads), ringtrain's runtime.threads."""
    return getattr(args, "threads", 1)


def mpirun_base(args):
    """mpirun for args.np ranks, each bound to its --threads cores (args.mpirun: the launcher).

    One thread: `--bind-to core`; more: `--map-by slot:PE=T`, so a rank's threads have cores of
    their own (under plain --bind-to core they would share one: ringtrain warns)."""
    threads = threads_per_rank(args)
    placement = ["--bind-to", "core"] if threads == 1 else ["--map-by", f"slot:PE={threads}", "--bind-to", "core"]
    return [args.mpirun, "-np", str(args.np)] + placement


def run_gemm(args):
    """`ringtrain bench gemm` on args.np ranks at once: its JSON result (gflops_aggregate)."""
    cmd = mpirun_base(args) + [args.ringtrain, "bench", "gemm", "--threads", str(threads_per_rank(args))]
    out, _ = run_cmd(cmd, args.gemm_timeout, env=ringtrain_env(), what="ringtrain bench gemm")
    obj = last_json_line(out, "gflops_aggregate")
    if obj is None:
        raise RunFailed(f"ringtrain bench gemm: no JSON line with gflops_aggregate in output\n{tail(out)}")
    return obj


def stats(xs):
    """Median, min, max and count of the values that are not None; None when there are none."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def run_repeats(args, peaks, measure_peak, one_repeat):
    """args.repeats rounds: the `bench gemm` peak first when measure_peak (appended to peaks with
    its repeat), then one_repeat(rep). Returns the status: 0; 1 after a RunFailed (logged); 130
    when interrupted."""
    try:
        for rep in range(args.repeats):
            log(f"=== repeat {rep + 1}/{args.repeats} ===")
            if measure_peak:
                g = run_gemm(args)
                g["repeat"] = rep
                peaks.append(g)
                log(f"  peak: {g['gflops_aggregate']:.1f} GFLOP/s aggregate")
            one_repeat(rep)
    except RunFailed as e:
        log(f"FAILED: {e}")
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    return 0


def save_raw(args, raw, status):
    """raw (with its status) as JSON to args.out when given; returns status."""
    raw["status"] = status
    if args.out:
        with open(args.out, "w") as f:
            json.dump(raw, f, indent=2)
        log(f"raw results: {args.out}")
    return status
