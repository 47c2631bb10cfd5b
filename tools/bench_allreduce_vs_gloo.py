#!/usr/bin/env python3
"""Allreduce busbw of ringtrain's own ring and of MPI_Allreduce against PyTorch's gloo, side by side.

Each repeat runs, in this order (interleaved repeats, so that drifts of a shared machine hit all
three alike):
  * mpirun -np N --bind-to core ringtrain bench allreduce --json --backends ring,mpi
  * tools/torch_allreduce_worker.py: torch.distributed gloo, N processes pinned one per core,
    one torch thread each, float32
at the same sizes, and prints one table: the median busbw per size of each, the ratios
ring/mpi and ring/gloo, and flags every size that misses a target (issue #5: ring >= mpi from
256 KiB up, ring >= 1.5x gloo everywhere). Exit status 1 when a target is missed or a result
was wrong (#wrong > 0), 2 when a run failed.

Stdlib only. PyTorch: --torch-python, default the venv of tools/setup-torch-venv
(${RINGTRAIN_TORCH_VENV:-~/.cache/ringtrain/torch-venv}).

    RINGTRAIN_TORCH_VENV=/opt/torchvenv tools/bench_allreduce_vs_gloo.py --ringtrain build/src/cli/ringtrain
"""

import argparse
import json
import os
import shutil
import statistics
import sys

from bench_process import REPO, RunFailed, default_venv, human, log, run_cmd, write_runs

WORKER = os.path.join(REPO, "tools", "torch_allreduce_worker.py")
MPI_FLOOR_BYTES = 256 << 10  # ring >= mpi is the target from this size up
GLOO_RATIO = 1.5             # ring >= this x gloo at every size


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def size_args(args):
    return ["--min-bytes", str(args.min_bytes), "--max-bytes", str(args.max_bytes), "--factor", str(args.factor),
            "--iters", str(args.iters), "--warmup", str(args.warmup)]


def run_ringtrain(args):
    env = dict(os.environ)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    # Containers often forbid the cross-process memory attach Open MPI tries first (tools/env.sh).
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    cmd = [args.mpirun, "-np", str(args.np), "--bind-to", "core", args.ringtrain, "bench", "allreduce", "--json",
           "--backends", "ring,mpi"] + size_args(args)
    out, _ = run_cmd(cmd, args.timeout, env=env, what="ringtrain bench allreduce")
    return json_lines(out)


def run_gloo(args):
    cmd = [args.torch_python, WORKER, "--np", str(args.np), "--timeout", str(args.timeout)] + size_args(args)
    out, _ = run_cmd(cmd, args.timeout + 60, what="gloo allreduce worker")
    return json_lines(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ringtrain", default=os.path.join("build", "src", "cli", "ringtrain"),
                    help="ringtrain binary (relative paths are relative to the repo root)")
    ap.add_argument("--torch-python", default=None, help="Python with torch (default: the torch venv's)")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--min-bytes", type=int, default=8)
    ap.add_argument("--max-bytes", type=int, default=256 << 20)
    ap.add_argument("--factor", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    ap.add_argument("--out", default=None, metavar="FILE.json", help="write every run's results here")
    args = ap.parse_args()
    if args.np < 2 or args.repeats < 1 or args.factor < 2 or args.min_bytes < 4:
        sys.exit("error: need --np >= 2, --repeats >= 1, --factor >= 2, --min-bytes >= 4 (one float)")
    if not os.path.isabs(args.ringtrain):
        args.ringtrain = os.path.join(REPO, args.ringtrain)
    if not os.access(args.ringtrain, os.X_OK):
        sys.exit(f"error: ringtrain binary not found: {args.ringtrain} (build it, or pass --ringtrain)")
    if shutil.which(args.mpirun) is None:
        sys.exit(f"error: {args.mpirun} not found on PATH")
    args.torch_python = args.torch_python or os.path.join(default_venv(), "bin", "python")
    if not os.access(args.torch_python, os.X_OK):
        sys.exit(f"error: no torch Python at {args.torch_python}; run tools/setup-torch-venv or pass --torch-python")

    # busbw[backend][bytes] -> one value per repeat; wrong counts summed over repeats.
    busbw, wrong, runs, torch_label = {}, {}, [], "gloo"
    try:
        for r in range(args.repeats):
            log(f"repeat {r + 1}/{args.repeats}")
            results = run_ringtrain(args) + run_gloo(args)
            runs.append(results)
            for j in results:
                busbw.setdefault(j["backend"], {}).setdefault(j["bytes"], []).append(j["busbw_gbs"])
                wrong[j["bytes"]] = wrong.get(j["bytes"], 0) + j.get("wrong", 0)
                if j["backend"] == "gloo":
                    torch_label = j["comm"]
    except RunFailed as e:
        log(f"error: {e}")
        return 2
    write_runs(args, runs)

    med = {b: {n: statistics.median(v) for n, v in sizes.items()} for b, sizes in busbw.items()}
    print(f"allreduce busbw (GB/s), {args.np} ranks, float32, median of {args.repeats} repeats x median of "
          f"{args.iters} iterations; gloo: {torch_label}")
    print()
    print("| size | ring | mpi | gloo | ring/mpi | ring/gloo | |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    missed = 0
    for nbytes in sorted(med["ring"]):
        ring, mpi, gloo = med["ring"][nbytes], med["mpi"][nbytes], med["gloo"][nbytes]
        flags = []
        if nbytes >= MPI_FLOOR_BYTES and ring < mpi:
            flags.append("MISS ring < mpi")
        if ring < GLOO_RATIO * gloo:
            flags.append(f"MISS ring < {GLOO_RATIO}x gloo")
        if wrong.get(nbytes, 0):
            flags.append(f"WRONG {wrong[nbytes]} elements")
        missed += bool(flags)
        print(f"| {human(nbytes)} | {ring:.3g} | {mpi:.3g} | {gloo:.3g} | {ring / mpi:.2f} | {ring / gloo:.3g} | "
              f"{', '.join(flags)} |")
    print()
    print(f"targets: ring >= mpi from {human(MPI_FLOOR_BYTES)} up, ring >= {GLOO_RATIO}x gloo at every size: "
          + ("all met" if not missed else f"{missed} size(s) missed"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
