#!/usr/bin/env python3
"""The shared-memory ring against MPI_Allreduce beside a busy neighbour (issue 21), side by side.

Each repeat runs `ringtrain bench allreduce --json --backends ring,mpi` (the two backends take
turns inside one run) in three settings, interleaved so that drifts of a shared machine hit all
alike:
  * quiet:      nothing else running;
  * neighbour:  a 2-rank CNN training job (examples/fashion_mnist/cnn.toml, checkpoints off) on
                the same cores, started first and stopped after, as on an oversubscribed or
                shared node;
  * load:       `--load-threads N` computing threads inside each benchmark rank instead
                (skipped with --load-threads 0, or for a binary without the option).
It prints, per size, the median busbw of each backend in each setting and the ratio ring/mpi,
and flags every size from 256 KiB to 64 MiB that misses a target: ring >= 0.5x mpi beside the
neighbour or the load, ring >= 1.0x mpi on the quiet machine. Exit status 1 when a target is
missed or a result was wrong (#wrong > 0), 2 when a run failed. Stdlib only.

    tools/prepare-fashion-mnist data/fashion-mnist   # tools/quickstart made it already
    tools/bench_ring_neighbour.py --ringtrain build/src/cli/ringtrain --repeats 3
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from bench_process import REPO, RunFailed, human, log, run_cmd, write_runs

TARGET_FROM, TARGET_TO = 256 << 10, 64 << 20  # the sizes the targets apply to
BUSY_RATIO, QUIET_RATIO = 0.5, 1.0


def mpi_env():
    env = dict(os.environ)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")  # as tools/env.sh
    return env


def bench(args, load_threads=0):
    cmd = [args.mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none", args.ringtrain, "bench", "allreduce",
           "--json", "--backends", "ring,mpi", "--min-bytes", str(args.min_bytes), "--max-bytes",
           str(args.max_bytes), "--factor", str(args.factor), "--iters", str(args.iters)]
    if load_threads:
        cmd += ["--load-threads", str(load_threads)]
    out, _ = run_cmd(cmd, args.timeout, env=mpi_env(), what="ringtrain bench allreduce")
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


class Neighbour:
    """A 2-rank CNN training run in the background, from its first logged step until stopped."""

    def __init__(self, args, run_dir):
        os.makedirs(run_dir, exist_ok=True)
        self.log_path = os.path.join(run_dir, "neighbour.log")
        cmd = [args.mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none", args.neighbour_ringtrain, "train",
               os.path.join(REPO, "examples", "fashion_mnist", "cnn.toml"),
               "--set", f"data.train={os.path.join(args.data, 'train.h5')}", "--set", "data.test=",
               "--set", "train.epochs=1000", "--set", "train.log_every=1", "--set", "checkpoint.enabled=false",
               "--set", f"run.dir={run_dir}"]
        log(f"$ {' '.join(cmd)} &")
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=mpi_env(), stdout=self.log_file, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RunFailed(f"the neighbour ended (exit {self.proc.returncode}); see {self.log_path}")
            with open(self.log_path) as f:
                if sum(" step " in line for line in f) >= 3:
                    return
            time.sleep(0.5)
        self.stop()
        raise RunFailed(f"the neighbour logged no training step within 120 s; see {self.log_path}")

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log_file.close()


def has_load_option(ringtrain):
    out = subprocess.run([ringtrain, "bench", "allreduce", "--help"], capture_output=True, text=True).stdout
    return "--load-threads" in out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ringtrain", default=os.path.join("build", "src", "cli", "ringtrain"),
                    help="the ringtrain binary benchmarked (relative paths: from the repo root)")
    ap.add_argument("--neighbour-ringtrain", default=None,
                    help="the binary the neighbour trains with (default: --ringtrain)")
    ap.add_argument("--data", default=os.path.join("data", "fashion-mnist"),
                    help="folder with train.h5 (tools/prepare-fashion-mnist makes it)")
    ap.add_argument("--min-bytes", type=int, default=256 << 10)
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--factor", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--load-threads", type=int, default=2, help="per rank, for the 'load' setting (0: skip it)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per benchmark run")
    ap.add_argument("--out", default=None, metavar="FILE.json", help="write every run's results here")
    args = ap.parse_args()
    for name in ("ringtrain", "data"):
        if not os.path.isabs(getattr(args, name)):
            setattr(args, name, os.path.join(REPO, getattr(args, name)))
    args.neighbour_ringtrain = os.path.abspath(args.neighbour_ringtrain or args.ringtrain)
    if not os.access(args.ringtrain, os.X_OK):
        sys.exit(f"error: ringtrain binary not found: {args.ringtrain} (build it, or pass --ringtrain)")
    if not os.path.isfile(os.path.join(args.data, "train.h5")):
        sys.exit(f"error: no train.h5 in {args.data} (run tools/prepare-fashion-mnist {args.data})")
    if shutil.which(args.mpirun) is None:
        sys.exit(f"error: {args.mpirun} not found on PATH")
    settings = ["quiet", "neighbour"]
    if args.load_threads > 0 and has_load_option(args.ringtrain):
        settings.append("load")

    busbw, wrong, runs = {}, 0, []  # busbw[setting][backend][bytes] -> one value per repeat
    try:
        with tempfile.TemporaryDirectory(prefix="ringtrain-neighbour-") as tmp:
            for r in range(args.repeats):
                for setting in settings:
                    log(f"repeat {r + 1}/{args.repeats}: {setting}")
                    if setting == "neighbour":
                        neighbour = Neighbour(args, os.path.join(tmp, f"run{r}"))
                        try:
                            results = bench(args)
                        finally:
                            neighbour.stop()
                    else:
                        results = bench(args, args.load_threads if setting == "load" else 0)
                    runs.append({"setting": setting, "results": results})
                    for j in results:
                        busbw.setdefault(setting, {}).setdefault(j["backend"], {}).setdefault(j["bytes"], []).append(
                            j["busbw_gbs"])
                        wrong += j.get("wrong", 0)
    except RunFailed as e:
        log(f"error: {e}")
        return 2
    write_runs(args, runs)

    med = {s: {b: {n: statistics.median(v) for n, v in sizes.items()} for b, sizes in backends.items()}
           for s, backends in busbw.items()}
    print(f"allreduce busbw (GB/s), 2 ranks, float32, median of {args.repeats} repeats x median of {args.iters} "
          f"iterations; neighbour: 2-rank CNN training; load: {args.load_threads} computing threads per rank")
    print()
    print("| size | " + " | ".join(f"{s} ring | {s} mpi | {s} ring/mpi" for s in settings) + " | |")
    print("| ---: |" + " ---: | ---: | ---: |" * len(settings) + " --- |")
    missed = 0
    for nbytes in sorted(med["quiet"]["ring"]):
        cells, flags = [], []
        for s in settings:
            ring, mpi = med[s]["ring"][nbytes], med[s]["mpi"][nbytes]
            cells.append(f"{ring:.3g} | {mpi:.3g} | {ring / mpi:.2f}")
            need = QUIET_RATIO if s == "quiet" else BUSY_RATIO
            if TARGET_FROM <= nbytes <= TARGET_TO and ring < need * mpi:
                flags.append(f"MISS {s}: ring < {need}x mpi")
        missed += bool(flags)
        print(f"| {human(nbytes)} | " + " | ".join(cells) + f" | {', '.join(flags)} |")
    print()
    print(f"targets from {human(TARGET_FROM)} to {human(TARGET_TO)}: ring >= {BUSY_RATIO}x mpi beside the neighbour "
          f"(and the load), >= {QUIET_RATIO}x quiet: " + ("all met" if not missed else f"{missed} size(s) missed")
          + (f"; {wrong} WRONG elements" if wrong else ""))
    return 1 if missed or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
