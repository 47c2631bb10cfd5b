#!/usr/bin/env python3
"""ZeRO stages side by side (issue 17): per-rank memory and training throughput of each
train.zero_stage against stage 0, at several world sizes, in one run.

For every world size (--np, default 1,2,4) and repeat (--repeats), `ringtrain bench train CONFIG
--synthetic --json` runs once per stage (--stages, default 0,1,2,3), the stages' order alternating
between repeats (0,1,2,3; 3,2,1,0; ...) so that drift on a noisy machine hits all alike. Each run
reports its "memory" object (bytes one rank holds, the largest over ranks: parameters,
gathered_parameters, gradients, optimizer_state, activations, comm_buffers, peak_rss) and samples/s.

Printed, as a markdown table per world size: each stage's training state per rank (parameters +
gradients + optimizer state) and its ratio to stage 0 next to the ideal for AdamW in f32
(stage 1: (4 + 4 + 8/W) / 16; stage 2: (4 + 12/W) / 16; stage 3: 1/W), stage 3's gathered groups
(other ranks' parameter shards held at once, reported apart as the issue asks), the comm buffers
(stage 2/3's gradient staging ring: temporary buffers, not model state, in the ZeRO paper's
terms) and the state with them, peak RSS per rank,
samples/s (median [min-max]) and the
throughput ratio to stage 0 (median of the per-repeat ratios). --out writes every raw result.

    python3 tools/bench_zero.py examples/fashion_mnist/mlp.toml --set optim.name=adamw --unset optim.momentum
    python3 tools/bench_zero.py examples/shakespeare/gpt.toml --np 1,2,4 --repeats 3 \\
        --set model.n_layer=12 --set model.n_head=12 --set model.n_embd=768 \\
        --set model.vocab_size=50257 --set model.block_size=64 --set train.batch_size=1

Stdlib only. Ranks beyond the machine's cores run with --oversubscribe (two or more per core).
"""

import argparse
import json
import os
import statistics
import sys

from bench_process import REPO, RunFailed, last_json_line, log, run_cmd

STATE_PARTS = ("parameters", "gradients", "optimizer_state")


def ideal_ratio(stage, world):
    """Training-state bytes of a stage over stage 0's, AdamW in f32 (4 + 4 + 8 bytes per parameter)."""
    if stage == 0:
        return 1.0
    if stage == 1:
        return (4 + 4 + 8 / world) / 16
    if stage == 2:
        return (4 + 12 / world) / 16
    return 1.0 / world


def run_bench(binary, config, world, stage, args):
    cmd = ["mpirun", "-np", str(world)]
    if world > (os.cpu_count() or 1):
        cmd += ["--oversubscribe", "--bind-to", "core:overload-allowed"]
    else:
        cmd += ["--bind-to", "core"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [binary, "bench", "train", config, "--synthetic", "--json", "--steps", str(args.steps), "--warmup",
            str(args.warmup), "--set", f"train.zero_stage={stage}"]
    for s in args.set:
        cmd += ["--set", s]
    for key in args.unset:
        cmd += ["--unset", key]
    out, err = run_cmd(cmd, args.timeout)
    result = last_json_line(out, "samples_per_s") or last_json_line(err, "samples_per_s")
    if result is None:
        raise RunFailed(f"world {world} stage {stage}: no JSON result line")
    return result


def spread(values):
    digits = 1 if statistics.median(values) >= 100 else 3
    return f"{statistics.median(values):,.{digits}f} [{min(values):,.{digits}f}-{max(values):,.{digits}f}]"


def mib(n):
    return f"{n / 2**20:,.1f}"


def report(world, stages, runs):
    """runs[stage] = list of results, one per repeat (same length for every stage)."""
    base = runs[0]
    print(f"\n### World {world}\n")
    print("| stage | params + grads + optimizer state per rank (MiB) | vs stage 0 | ideal (AdamW f32) |"
          " gathered parameters (MiB) | comm buffers (MiB) | state + comm buffers vs stage 0 |"
          " optimizer state (MiB) | activations (MiB) | peak RSS per rank (MiB) |"
          " samples/s median [min-max] | throughput vs stage 0 |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base_state = statistics.median(sum(r["memory"][p] for p in STATE_PARTS) for r in base)
    for stage in stages:
        rs = runs[stage]
        state = statistics.median(sum(r["memory"][p] for p in STATE_PARTS) for r in rs)
        with_comm = statistics.median(sum(r["memory"][p] for p in STATE_PARTS + ("comm_buffers",)) for r in rs)
        ratios = [r["samples_per_s"] / b["samples_per_s"] for r, b in zip(rs, base)]
        print(f"| {stage} | {mib(state)} | {state / base_state:.4f} | {ideal_ratio(stage, world):.4f} |"
              f" {mib(statistics.median(r['memory']['gathered_parameters'] for r in rs))} |"
              f" {mib(statistics.median(r['memory']['comm_buffers'] for r in rs))} |"
              f" {with_comm / base_state:.4f} |"
              f" {mib(statistics.median(r['memory']['optimizer_state'] for r in rs))} |"
              f" {mib(statistics.median(r['memory']['activations'] for r in rs))} |"
              f" {mib(statistics.median(r['memory']['peak_rss'] for r in rs))} |"
              f" {spread([r['samples_per_s'] for r in rs])} | {statistics.median(ratios):.3f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config")
    p.add_argument("--np", default="1,2,4", help="world sizes, comma-separated")
    p.add_argument("--stages", default="0,1,2,3", help="train.zero_stage values; 0 must be among them")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    p.add_argument("--unset", action="append", default=[], metavar="KEY", help="drop a config key (repeatable)")
    p.add_argument("--binary", default=os.path.join(REPO, "build", "src", "cli", "ringtrain"))
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--out", help="write every raw result here (JSON)")
    args = p.parse_args()
    worlds = [int(w) for w in args.np.split(",")]
    stages = [int(s) for s in args.stages.split(",")]
    if 0 not in stages:
        sys.exit("error: --stages must include 0 (the baseline)")
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"error: {args.binary}: no ringtrain binary (build it, or give --binary)")
    raw = {}
    try:
        for world in worlds:
            runs = {s: [] for s in stages}
            for rep in range(args.repeats):
                order = stages if rep % 2 == 0 else list(reversed(stages))
                for stage in order:
                    log(f"world {world}, repeat {rep + 1}/{args.repeats}, stage {stage}")
                    runs[stage].append(run_bench(args.binary, args.config, world, stage, args))
            raw[world] = runs
            report(world, stages, runs)
    except RunFailed as e:
        sys.exit(f"error: {e}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"config": args.config, "set": args.set, "unset": args.unset, "results": raw}, f, indent=1)


if __name__ == "__main__":
    main()
