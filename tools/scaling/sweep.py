#!/usr/bin/env python3
"""Scaling sweep on this machine: `ringtrain bench train --json` over rank counts in weak
scaling (fixed per-rank batch; also with one BLAS thread per rank) and strong scaling (fixed
global batch), plus `ringtrain bench
allreduce --json` at each rank count (the model's calibration data), all under mpirun.

Writes OUT/scaling.csv (one row per config, mode, rank count and repeat) and OUT/allreduce.csv
(one row per rank count, backend, message size and repeat). Rank counts above the machine's
cores are oversubscribed: the `oversubscribed` column says so (such ranks share cores, so their
compute slows down; that is not a property of the network).

Example: tools/scaling/sweep.py --exe build/src/cli/ringtrain --out runs/scaling --ranks 1 2 4
Under Slurm, jobs/scaling.sbatch runs one point per job and appends a JSON line;
`sweep.py --from-jsonl runs/scaling.jsonl --out DIR` writes those points as DIR/scaling.csv.
"""
import argparse
import csv
import json
import os
import subprocess
import sys

SCALING_FIELDS = [
    "config", "mode", "ranks", "repeat", "oversubscribed", "per_rank_batch", "global_batch", "threads_per_rank",
    "samples_per_s", "samples_per_s_per_rank", "step_ms", "data_wait_ms", "forward_ms", "backward_ms",
    "exposed_comm_ms", "optimizer_ms", "allreduce_ms", "grad_bytes", "buckets", "bucket_mb", "overlap",
    "allreduce_busbw_GBps", "params", "flops_per_sample",
]
ALLREDUCE_FIELDS = ["ranks", "repeat", "oversubscribed", "backend", "comm", "bytes", "time_us", "algbw_gbs", "busbw_gbs"]


def mpirun(ranks, exe, args, env):
    """Runs `mpirun -np ranks exe args`; returns the JSON objects it printed, one per line."""
    cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none", exe] + args
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"sweep: error: {' '.join(cmd)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not rows:
        sys.exit(f"sweep: error: {' '.join(cmd)} printed no JSON:\n{done.stdout}\n{done.stderr}")
    return rows


def write_csv(path, fields, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    print(f"sweep: wrote {path} ({len(rows)} rows)")


def from_jsonl(paths, out):
    """scaling.csv rows from jobs/scaling.sbatch's lines (one bench train result per job)."""
    rows, seen = [], {}
    for path in paths:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                j = json.loads(line)
                key = (j["config"], j["mode"], j["ranks"])
                seen[key] = seen.get(key, -1) + 1
                row = {k: j.get(k) for k in SCALING_FIELDS}
                row.update(repeat=seen[key], oversubscribed=False)
                rows.append(row)
    write_csv(os.path.join(out, "scaling.csv"), SCALING_FIELDS, rows)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exe", default="build/src/cli/ringtrain")
    p.add_argument("--out", default="runs/scaling")
    p.add_argument("--configs", nargs="+", default=["examples/fashion_mnist/cnn.toml"])
    p.add_argument("--ranks", nargs="+", type=int, default=[1, 2, 4])
    p.add_argument("--per-rank-batch", type=int, default=64, help="weak scaling: samples per rank and step")
    p.add_argument("--global-batch", type=int, default=256, help="strong scaling: samples per step over all ranks")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--allreduce-max-bytes", type=int, default=64 << 20)
    p.add_argument("--real-data", action="store_true", help="time the loader too (default: --synthetic)")
    p.add_argument("--from-jsonl", nargs="+", metavar="FILE",
                   help="no sweep: convert jobs/scaling.sbatch's JSON lines into OUT/scaling.csv")
    a = p.parse_args()

    os.makedirs(a.out, exist_ok=True)
    if a.from_jsonl:
        from_jsonl(a.from_jsonl, a.out)
        return
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cores = os.cpu_count() or 1
    scaling_rows, allreduce_rows = [], []
    for repeat in range(a.repeats):  # repeats outermost: slow drifts of a shared machine hit every point alike
        for ranks in a.ranks:
            for config in a.configs:
                # weak_1thread: weak scaling with one BLAS thread per rank, so that 1 rank uses one
                # core and each added rank adds a core (while there are cores to add).
                for mode in ("weak", "strong", "weak_1thread"):
                    if (mode == "strong" and a.global_batch % ranks) or (mode == "weak_1thread" and ranks > cores):
                        continue
                    batch = a.global_batch // ranks if mode == "strong" else a.per_rank_batch
                    args = ["bench", "train", config, "--json", "--steps", str(a.steps), "--warmup", str(a.warmup),
                            "--set", f"train.batch_size={batch}"] + ([] if a.real_data else ["--synthetic"])
                    if mode == "weak_1thread":
                        args += ["--set", "runtime.threads=1"]
                    j = mpirun(ranks, a.exe, args, env)[-1]
                    row = {k: j.get(k) for k in SCALING_FIELDS}
                    row.update(config=config, mode=mode, repeat=repeat, oversubscribed=ranks > cores)
                    scaling_rows.append(row)
                    print(f"sweep: {config} {mode} {ranks} ranks (repeat {repeat + 1}/{a.repeats}): "
                          f"{j['samples_per_s']:.0f} samples/s, step {j['step_ms']:.2f} ms", flush=True)
            if ranks > 1:
                args = ["bench", "allreduce", "--json", "--backends", "ring,mpi", "--max-bytes",
                        str(a.allreduce_max_bytes), "--iters", "10", "--warmup", "3"]
                for j in mpirun(ranks, a.exe, args, env):
                    row = {k: j.get(k) for k in ALLREDUCE_FIELDS}
                    row.update(repeat=repeat, oversubscribed=ranks > cores)
                    allreduce_rows.append(row)
    write_csv(os.path.join(a.out, "scaling.csv"), SCALING_FIELDS, scaling_rows)
    write_csv(os.path.join(a.out, "allreduce.csv"), ALLREDUCE_FIELDS, allreduce_rows)


if __name__ == "__main__":
    main()
