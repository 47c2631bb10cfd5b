#!/usr/bin/env python3
"""Performance model of ringtrain's data-parallel step (pure Python, no dependencies).

Allreduce cost per level, alpha-beta ring: T(n, p) = 2(p-1) a + 2(p-1)/p n b (a: latency per
message step, b: seconds per byte). Hierarchical (g ranks per node, N nodes): reduce-scatter
inside the node, a ring over the nodes with n/g bytes, allgather inside the node.
The gradient is cut into buckets (ringtrain's plan: `first_bucket_mb` first, then `bucket_mb`);
backward produces them uniformly over its duration from the last layer back; the comm thread
reduces them in order, each starting when it is ready and the previous one is done. Exposed
communication = when the last bucket is reduced minus the end of backward (with overlap), or
the sum of all buckets (without). Step = data + forward + backward + optimizer + exposed.

Commands:
  calibrate ALLREDUCE.csv             fit a, b per rank count from `bench allreduce` rows
  check SCALING.csv ALLREDUCE.csv     predict every point of a sweep from its 1-rank points (compute
                                      per sample on one core, thread efficiency) and the allreduce
                                      fit at that rank count; print the error of each
  predict [options]                   efficiency from 1 to 4096 GPUs on a fabric preset
  self-test                           checks of the formulas (run by ctest)
"""
import argparse
import csv
import json
import math
import os
import statistics
import sys

# Fabric presets (per GPU, one direction). These are predictions from datasheet figures, not
# measurements: a is a typical small-message step latency, bw the achievable busbw per GPU.
PRESETS = {
    # NVLink 4 on H100/H200 SXM: 450 GB/s per direction line rate; NCCL's maintainers give ~370
    # GB/s as the effective ring busbw after protocol overhead (NVIDIA/nccl-tests issue #212).
    "nvlink4": {"a": 3e-6, "bw": 370e9,
                "source": "NVLink 4: 450 GB/s/direction line rate, ~370 GB/s ring busbw (NVIDIA/nccl-tests #212)"},
    # NDR InfiniBand: 400 Gb/s = 50 GB/s per port, one ConnectX-7 port per GPU (DGX H100 user guide).
    "ndr": {"a": 5e-6, "bw": 45e9, "source": "NVIDIA ConnectX-7 NDR 400 Gb/s, one per GPU (DGX H100 guide); 90% usable"},
    # HDR InfiniBand: 200 Gb/s = 25 GB/s per port, one per GPU (DGX A100 user guide).
    "hdr": {"a": 5e-6, "bw": 22.5e9, "source": "NVIDIA ConnectX-6 HDR 200 Gb/s, one per GPU (DGX A100 guide); 90% usable"},
}


def ring_time(n_bytes, p, a, b):
    """Seconds for a ring allreduce of n_bytes over p ranks."""
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * a + 2 * (p - 1) / p * n_bytes * b


def hierarchical_time(n_bytes, gpus_per_node, nodes, intra, inter):
    """Reduce-scatter in the node, ring over nodes on 1/g of the data, allgather in the node."""
    g = gpus_per_node
    t = 0.0
    if g > 1:  # reduce-scatter + allgather inside the node = one intra-node ring allreduce
        t += ring_time(n_bytes, g, intra["a"], 1 / intra["bw"])
    if nodes > 1:
        t += ring_time(n_bytes / g, nodes, inter["a"], 1 / inter["bw"])
    return t


def bucket_sizes(grad_bytes, bucket_mb, first_bucket_mb):
    """Bucket sizes in the order they are reduced (the last layers' bucket first)."""
    sizes, left = [], grad_bytes
    first = max(1, int(first_bucket_mb * 1e6))
    rest = max(1, int(bucket_mb * 1e6))
    while left > 0:
        take = min(left, first if not sizes else rest)
        sizes.append(take)
        left -= take
    return sizes


def exposed_comm(sizes, backward_s, allreduce, overlap=True):
    """Seconds of communication left after backward ends, for buckets reduced by `allreduce`."""
    if not overlap:
        return sum(allreduce(s) for s in sizes)
    total = sum(sizes)
    done_bytes, comm_end = 0, 0.0
    for s in sizes:
        done_bytes += s
        ready = backward_s * done_bytes / total
        comm_end = max(ready, comm_end) + allreduce(s)
    return max(0.0, comm_end - backward_s)


def fit_line(xs, ys, weights=None):
    """Weighted least-squares intercept and slope."""
    w = weights or [1.0] * len(xs)
    sw = sum(w)
    mx = sum(wi * x for wi, x in zip(w, xs)) / sw
    my = sum(wi * y for wi, y in zip(w, ys)) / sw
    sxx = sum(wi * (x - mx) ** 2 for wi, x in zip(w, xs))
    slope = sum(wi * (x - mx) * (y - my) for wi, x, y in zip(w, xs, ys)) / sxx if sxx else 0.0
    return my - slope * mx, slope


def calibrate(allreduce_csv):
    """{ranks: (a, b)} from median times per message size: T = 2(p-1)a + 2(p-1)/p n b."""
    by_point = {}
    with open(allreduce_csv) as f:
        for r in csv.DictReader(f):
            if r["backend"] != "ring":  # the model is of ringtrain's own ring
                continue
            key = (int(r["ranks"]), int(r["bytes"]))
            by_point.setdefault(key, []).append(float(r["time_us"]) * 1e-6)
    fits = {}
    for p in sorted({k[0] for k in by_point}):
        sizes = sorted(n for (q, n) in by_point if q == p)
        xs = [n for n in sizes]
        ys = [statistics.median(by_point[(p, n)]) for n in sizes]
        # Relative errors count alike over the decades of sizes (weights 1/T^2), so the small
        # messages fix the latency and the large ones the bandwidth.
        intercept, slope = fit_line(xs, ys, [1 / (y * y) for y in ys])
        fits[p] = (max(intercept, 0.0) / (2 * (p - 1)), max(slope, 1e-15) / (2 * (p - 1) / p))
    return fits


def compute_ms(row):
    return sum(float(row[k]) for k in ("forward_ms", "backward_ms", "optimizer_ms"))


class OneRankCalibration:
    """What one rank measured, per config: compute per sample on one core, the share of it
    that is backward, and how well a rank uses more than one BLAS thread."""

    def __init__(self, rows, cores):
        self.cores = cores
        one = [r for r in rows if int(r["ranks"]) == 1]
        single = [r for r in one if r["mode"] == "weak_1thread"]
        multi = [r for r in one if r["mode"] == "weak"]
        if not single or not multi:
            sys.exit("model: error: the sweep needs 1-rank 'weak' and 'weak_1thread' points to calibrate")
        self.ms_per_sample = statistics.median(compute_ms(r) / int(r["per_rank_batch"]) for r in single)
        self.backward_share = statistics.median(float(r["backward_ms"]) / compute_ms(r) for r in single)
        threads = int(multi[0]["threads_per_rank"])
        speedup = statistics.median(compute_ms(r) / int(r["per_rank_batch"]) for r in single) / statistics.median(
            compute_ms(r) / int(r["per_rank_batch"]) for r in multi)
        self.thread_efficiency = speedup / threads if threads > 1 else 1.0

    def compute_s(self, ranks, batch, threads):
        """A rank's compute seconds: its threads, or its share of the cores when they run out."""
        cores_per_rank = min(threads, self.cores / ranks)
        useful = cores_per_rank * (self.thread_efficiency if threads > 1 else 1.0)
        return self.ms_per_sample * batch / useful / 1e3


def predict_point(row, calibration, a, b):
    """Predicted step seconds of a sweep row from 1-rank measurements and the allreduce fit."""
    p = int(row["ranks"])
    compute = calibration.compute_s(p, int(row["per_rank_batch"]), int(row["threads_per_rank"]))
    backward = compute * calibration.backward_share
    sizes = bucket_sizes(int(row["grad_bytes"]), float(row["bucket_mb"]), 0.25)
    exposed = exposed_comm(sizes, backward, lambda n: ring_time(n, p, a, b), row["overlap"] in ("True", "true", "1"))
    return compute + exposed


def check(scaling_csv, allreduce_csv, cores):
    fits = calibrate(allreduce_csv)
    with open(scaling_csv) as f:
        rows = list(csv.DictReader(f))
    groups = {}
    for r in rows:
        groups.setdefault((r["config"], r["mode"], int(r["ranks"])), []).append(r)
    calibrations = {c: OneRankCalibration([r for r in rows if r["config"] == c], cores) for c in {k[0] for k in groups}}
    out = []
    for (config, mode, p), group in sorted(groups.items()):
        a, b = fits.get(p, (0.0, 0.0))
        measured = statistics.median(float(r["step_ms"]) / 1e3 for r in group)
        predicted = statistics.median(predict_point(r, calibrations[config], a, b) for r in group)
        out.append({"config": config, "mode": mode, "ranks": p, "measured_step_ms": 1e3 * measured,
                    "predicted_step_ms": 1e3 * predicted, "error": (predicted - measured) / measured,
                    "alpha_us": a * 1e6, "bw_GBps": 1 / b / 1e9 if b else None,
                    "calibration_point": p == 1 and mode in ("weak", "weak_1thread")})
    return out


def weak_efficiency(compute_s, backward_s, grad_bytes, gpus, gpus_per_node, intra, inter, bucket_mb=25.0,
                    overlap=True):
    """Weak-scaling efficiency (step time on 1 GPU / on `gpus`) with hierarchical allreduce."""
    nodes = max(1, math.ceil(gpus / gpus_per_node))
    g = min(gpus, gpus_per_node)
    sizes = bucket_sizes(grad_bytes, bucket_mb, min(bucket_mb, 1.0))
    exposed = exposed_comm(sizes, backward_s, lambda n: hierarchical_time(n, g, nodes, intra, inter), overlap)
    return compute_s / (compute_s + exposed), exposed


def predict_table(compute_s, backward_s, grad_bytes, fabric, gpus_list, gpus_per_node, bucket_mb):
    rows = []
    for gpus in gpus_list:
        eff, exposed = weak_efficiency(compute_s, backward_s, grad_bytes, gpus, gpus_per_node, PRESETS["nvlink4"],
                                       PRESETS[fabric], bucket_mb, True)
        eff_no, exposed_no = weak_efficiency(compute_s, backward_s, grad_bytes, gpus, gpus_per_node,
                                             PRESETS["nvlink4"], PRESETS[fabric], bucket_mb, False)
        rows.append({"gpus": gpus, "efficiency_overlap": eff, "exposed_ms_overlap": exposed * 1e3,
                     "efficiency_no_overlap": eff_no, "exposed_ms_no_overlap": exposed_no * 1e3})
    return rows


def self_test():
    assert ring_time(1e6, 1, 1e-5, 1e-9) == 0.0
    # p = 2: 2 steps of latency, n bytes over the link once each way.
    assert abs(ring_time(1e6, 2, 1e-5, 1e-9) - (2e-5 + 1e-3)) < 1e-12
    # Large p: bandwidth term tends to 2 n b.
    assert abs(ring_time(1e9, 10**6, 0.0, 1e-9) - 2.0) < 1e-5
    assert bucket_sizes(2_500_000, 1.0, 0.25) == [250_000, 1_000_000, 1_000_000, 250_000]
    # A single bucket ready at the end of backward is fully exposed; tiny ones are hidden.
    assert abs(exposed_comm([100], 1.0, lambda n: 0.5) - 0.5) < 1e-12
    assert exposed_comm([1] * 100, 1.0, lambda n: 0.001) < 0.01 + 1e-9
    assert abs(exposed_comm([1, 1], 1.0, lambda n: 0.3, overlap=False) - 0.6) < 1e-12
    # Hierarchical on one node is the intra ring; on many nodes the inter part moves n/g bytes.
    intra, inter = {"a": 0.0, "bw": 100.0}, {"a": 0.0, "bw": 10.0}
    assert abs(hierarchical_time(800, 8, 1, intra, inter) - ring_time(800, 8, 0, 0.01)) < 1e-12
    assert abs(hierarchical_time(800, 8, 2, intra, inter) - (ring_time(800, 8, 0, 0.01) + ring_time(100, 2, 0, 0.1))) < 1e-12
    # Calibration recovers a and b from exact data.
    a, b, p = 7e-6, 2e-10, 4
    xs = [4096 * 2**k for k in range(10)]
    intercept, slope = fit_line(xs, [ring_time(n, p, a, b) for n in xs])
    assert abs(intercept / (2 * (p - 1)) - a) < 1e-12 and abs(slope / (2 * (p - 1) / p) - b) < 1e-18
    print("model self-test: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("calibrate")
    c.add_argument("allreduce_csv")
    k = sub.add_parser("check")
    k.add_argument("scaling_csv")
    k.add_argument("allreduce_csv")
    k.add_argument("--cores", type=int, default=os.cpu_count(), help="cores of the machine the sweep ran on")
    k.add_argument("--json", action="store_true")
    pr = sub.add_parser("predict")
    pr.add_argument("--compute-ms", type=float, required=True, help="forward+backward+optimizer on one GPU")
    pr.add_argument("--backward-ms", type=float, required=True)
    pr.add_argument("--grad-mb", type=float, required=True)
    pr.add_argument("--fabric", choices=[k for k in PRESETS if k != "nvlink4"], default="ndr")
    pr.add_argument("--gpus-per-node", type=int, default=8)
    pr.add_argument("--bucket-mb", type=float, default=25.0)
    pr.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096])
    pr.add_argument("--json", action="store_true")
    sub.add_parser("self-test")
    a = ap.parse_args()
    if a.cmd == "self-test":
        self_test()
    elif a.cmd == "calibrate":
        for p, (alpha, beta) in calibrate(a.allreduce_csv).items():
            print(f"{p} ranks: a = {alpha * 1e6:.2f} us per step, bandwidth 1/b = {1 / beta / 1e9:.2f} GB/s")
    elif a.cmd == "check":
        rows = check(a.scaling_csv, a.allreduce_csv, a.cores)
        if a.json:
            print(json.dumps(rows))
            return
        print("config | mode | ranks | measured step ms | predicted step ms | error")
        for r in rows:
            print(f"{r['config']} | {r['mode']} | {r['ranks']} | {r['measured_step_ms']:.2f} | "
                  f"{r['predicted_step_ms']:.2f} | {100 * r['error']:+.1f}%"
                  + (" (calibration point)" if r["calibration_point"] else ""))
        predicted = [r for r in rows if not r["calibration_point"]]
        worst = max(abs(r["error"]) for r in predicted)
        print(f"largest error: {100 * worst:.1f}% over {len(predicted)} predicted points "
              f"(median {100 * statistics.median(abs(r['error']) for r in predicted):.1f}%)")
    else:
        rows = predict_table(a.compute_ms / 1e3, a.backward_ms / 1e3, a.grad_mb * 1e6, a.fabric, a.gpus,
                             a.gpus_per_node, a.bucket_mb)
        if a.json:
            print(json.dumps(rows))
            return
        print(f"PREDICTED (not measured): weak scaling, {a.gpus_per_node} GPUs per node on NVLink 4, "
              f"{a.fabric} between nodes ({PRESETS[a.fabric]['source']})")
        print("gpus | efficiency (overlap) | exposed ms | efficiency (no overlap) | exposed ms")
        for r in rows:
            print(f"{r['gpus']} | {100 * r['efficiency_overlap']:.1f}% | {r['exposed_ms_overlap']:.2f} | "
                  f"{100 * r['efficiency_no_overlap']:.1f}% | {r['exposed_ms_no_overlap']:.2f}")


if __name__ == "__main__":
    main()
