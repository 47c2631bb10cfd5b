"""Shared by the side-by-side benchmark drivers (tools/bench_vs_pytorch.py,
tools/bench_gpt_vs_pytorch.py): running a command with a timeout that kills its whole process
group, logging, and finding a result's JSON line in a command's output. Stdlib only.
"""

import json
import os
import signal
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
