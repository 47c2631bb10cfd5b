#!/usr/bin/env python3
"""Plots of a scaling sweep (needs matplotlib: Debian python3-matplotlib, run with /usr/bin/python3).

From OUT/scaling.csv and OUT/allreduce.csv (tools/scaling/sweep.py) writes into OUT:
  throughput.png   samples/s vs ranks per mode with the ideal (linear from 1 rank) line, and
                   scaling efficiency = rate(p) / (p x rate(1)) beside it
  breakdown.png    stacked median step time per rank count (data, forward, backward, exposed comm, optimizer)
  allreduce.png    allreduce busbw vs message size per rank count and backend (own ring, MPI_Allreduce)
  prediction.png   the model's predicted weak-scaling efficiency to 4096 GPUs (PREDICTED, labelled so)
Points are medians over the sweep's repeats; oversubscribed rank counts are marked.
"""
import argparse
import csv
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model  # noqa: E402

PARTS = [("data_wait_ms", "data wait"), ("forward_ms", "forward"), ("backward_ms", "backward"),
         ("exposed_comm_ms", "exposed comm"), ("optimizer_ms", "optimizer")]


def medians(rows, keys, field):
    """{key tuple: median of field} over rows grouped by keys."""
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(float(r[field]))
    return {k: statistics.median(v) for k, v in groups.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/scaling")
    ap.add_argument("--predict-compute-ms", type=float, default=70.0)
    ap.add_argument("--predict-backward-ms", type=float, default=47.0)
    ap.add_argument("--predict-grad-mb", type=float, default=102.0)
    a = ap.parse_args()
    with open(os.path.join(a.out, "scaling.csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(a.out, "allreduce.csv")) as f:
        ar = list(csv.DictReader(f))
    configs = sorted({r["config"] for r in rows})
    modes = sorted({r["mode"] for r in rows})
    rate = medians(rows, ["config", "mode", "ranks"], "samples_per_s")
    over = {int(r["ranks"]) for r in rows if r["oversubscribed"] == "True"}

    fig, (t_ax, e_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    for config in configs:
        name = os.path.splitext(os.path.basename(config))[0]
        for mode in modes:
            pts = sorted((int(k[2]), v) for k, v in rate.items() if k[0] == config and k[1] == mode)
            if not pts or pts[0][0] != 1:
                continue
            xs, ys = [p for p, _ in pts], [v for _, v in pts]
            line = t_ax.plot(xs, ys, "o-", label=f"{name} {mode}")[0]
            t_ax.plot(xs, [ys[0] * x for x in xs], ":", color=line.get_color(), label=f"{name} {mode} ideal")
            e_ax.plot(xs, [100 * y / (x * ys[0]) for x, y in zip(xs, ys)], "o-", label=f"{name} {mode}")
    for ax in (t_ax, e_ax):
        ax.set_xlabel("ranks" + (f" (oversubscribed: {sorted(over)})" if over else ""))
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    t_ax.set_ylabel("training samples/s (all ranks)")
    t_ax.set_title("Throughput vs ranks (dotted: linear from 1 rank)")
    e_ax.set_ylabel("scaling efficiency (%)")
    e_ax.set_title("Efficiency = rate(p) / (p x rate(1))")
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "throughput.png"), dpi=120)

    fig, axes = plt.subplots(1, len(modes), figsize=(5 * len(modes), 4.5), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        for config in configs[:1]:
            sel = [r for r in rows if r["config"] == config and r["mode"] == mode]
            ranks = sorted({int(r["ranks"]) for r in sel})
            bottom = [0.0] * len(ranks)
            for field, label in PARTS:
                med = medians(sel, ["ranks"], field)
                vals = [med[(str(p),)] for p in ranks]
                ax.bar([str(p) for p in ranks], vals, bottom=bottom, label=label)
                bottom = [b + v for b, v in zip(bottom, vals)]
            ax.set_title(f"{os.path.basename(config)}: {mode}")
        ax.set_xlabel("ranks")
        ax.set_ylabel("median step time (ms, rank 0)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "breakdown.png"), dpi=120)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    busbw = medians(ar, ["ranks", "backend", "bytes"], "busbw_gbs")
    for p, backend in sorted({(int(k[0]), k[1]) for k in busbw}):
        pts = sorted((int(k[2]), v) for k, v in busbw.items() if int(k[0]) == p and k[1] == backend)
        ax.plot([n for n, _ in pts], [v for _, v in pts], "o-" if backend == "ring" else "x--", ms=3,
                label=f"{p} ranks, {backend}" + (" (oversubscribed)" if p in over else ""))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s) = algbw x 2(p-1)/p")
    ax.set_title("allreduce busbw on this machine: ringtrain's ring vs MPI_Allreduce")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "allreduce.png"), dpi=120)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    gpus = [2**k for k in range(13)]
    for fabric in ("ndr", "hdr"):
        for overlap in (True, False):
            effs = [100 * model.weak_efficiency(a.predict_compute_ms / 1e3, a.predict_backward_ms / 1e3,
                                                a.predict_grad_mb * 1e6, g, 8, model.PRESETS["nvlink4"],
                                                model.PRESETS[fabric], 25.0, overlap)[0] for g in gpus]
            ax.plot(gpus, effs, "o-" if overlap else "x--", ms=3,
                    label=f"{fabric.upper()}, {'overlap' if overlap else 'no overlap'}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs (8 per node, NVLink 4 inside)")
    ax.set_ylabel("predicted weak-scaling efficiency (%)")
    ax.set_title(f"PREDICTED: {a.predict_grad_mb:.0f} MB gradient, {a.predict_compute_ms:.0f} ms compute/step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "prediction.png"), dpi=120)
    print(f"plot: wrote throughput.png, breakdown.png, allreduce.png and prediction.png to {a.out}")


if __name__ == "__main__":
    main()
