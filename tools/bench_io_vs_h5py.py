#!/usr/bin/env python3
"""ringtrain's loader against h5py reading the same samples in the same order, side by side.

Each round runs `ringtrain bench io FILE --order-out PREFIX` under mpirun (one pass: open the
dataset, plus reading it for the memory strategy, then every batch of one training epoch decoded
to normalized float32; the JSON line also holds the raw pread bandwidth of the file measured in
the same run), then one h5py process per rank that reads that rank's samples in the order
ringtrain used, batch by batch, and turns them into normalized float32 batches the same way
((u8 / 255 - mean) / std). h5py fancy indexing needs increasing indices, so each batch is read
sorted and put back in order. For context it also times the other common way, reading the
whole dataset with one h5py call and indexing the numpy array (`h5py_whole_*`): that is no
longer reading samples in order, it is ringtrain's memory strategy done by numpy. Rounds
alternate ringtrain and h5py; the figures are medians.

Needs numpy and h5py (Debian: /usr/bin/python3 with python3-h5py; or a venv with h5py).
Example:
  /usr/bin/python3 tools/bench_io_vs_h5py.py --exe build/src/cli/ringtrain --data data/fashion-mnist/train.h5 \\
      --ranks 2 --repeats 5
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def h5py_worker(args):
    """One rank's pass with h5py; prints one JSON line."""
    import h5py
    import numpy as np

    os.sched_setaffinity(0, {args.worker % os.cpu_count()})  # like mpirun --bind-to core
    order = np.fromfile(f"{args.order_prefix}.rank{args.worker}.i64", dtype=np.int64)
    lut = ((np.arange(256, dtype=np.float64) / 255.0 - args.mean) / args.std).astype(np.float32)
    cache = args.h5py_cache_mb << 20
    t0 = time.perf_counter()
    with h5py.File(args.data, "r", rdcc_nbytes=cache, rdcc_nslots=max(521, cache >> 16)) as f:
        images, labels = f[args.images_key], f[args.labels_key]
        if args.mode == "whole":
            images, labels = images[:], labels[:]
        total = 0
        for b in range(0, len(order), args.batch):
            idx = order[b:b + args.batch]
            if args.mode == "whole":
                raw, y = images[idx], labels[idx].astype(np.int32)
            else:
                sort = np.argsort(idx, kind="stable")
                raw = np.empty((len(idx),) + images.shape[1:], dtype=images.dtype)
                raw[sort] = images[idx[sort]]
                y = np.empty(len(idx), dtype=np.int32)
                y[sort] = labels[idx[sort]]
            x = lut[raw]  # float32 batch [B, C, H, W]
            total += x.shape[0]
    seconds = time.perf_counter() - t0
    print(json.dumps({"rank": args.worker, "samples": total, "seconds": seconds}))


def run_h5py(args, prefix, mode):
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(r), "--mode", mode, "--order-prefix", prefix,
                               "--data", args.data, "--batch", str(args.batch), "--mean", str(args.mean),
                               "--std", str(args.std), "--images-key", args.images_key,
                               "--labels-key", args.labels_key, "--h5py-cache-mb", str(args.h5py_cache_mb)],
                              stdout=subprocess.PIPE, text=True) for r in range(args.ranks)]
    results = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            sys.exit(f"h5py worker failed ({p.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    samples = sum(r["samples"] for r in results)
    return samples / max(r["seconds"] for r in results)


def run_ringtrain(args, prefix):
    cmd = ["mpirun", "--allow-run-as-root", "-np", str(args.ranks), "--bind-to", "core", args.exe, "bench", "io",
           args.data, "--strategy", args.strategy, "--batch", str(args.batch), "--repeats", "1",
           "--images-key", args.images_key, "--labels-key", args.labels_key, "--order-out", prefix]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", default="build/src/cli/ringtrain")
    ap.add_argument("--data", required=True, help="one HDF5 file with uint8 samples")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--strategy", default="memory", choices=["memory", "stream"])
    ap.add_argument("--batch", type=int, default=64, help="samples per rank and batch")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--mean", type=float, default=0.0)
    ap.add_argument("--std", type=float, default=1.0)
    ap.add_argument("--images-key", default="images")
    ap.add_argument("--labels-key", default="labels")
    ap.add_argument("--h5py-cache-mb", type=int, default=0,
                    help="h5py chunk cache per process (0: the file's size, so every chunk stays cached)")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=["batches", "whole"], help=argparse.SUPPRESS)
    ap.add_argument("--order-prefix", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        return h5py_worker(args)
    if args.h5py_cache_mb == 0:
        args.h5py_cache_mb = (os.path.getsize(args.data) >> 20) + 1
    ours, theirs, whole, raw, reads = [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "order")
        for _ in range(args.repeats):
            j = run_ringtrain(args, prefix)
            ours.append(j["pass_samples_per_s_aggregate"])
            raw.append(j["raw_read_MBps_aggregate"])
            reads.append(j["read_MBps_aggregate"])
            theirs.append(run_h5py(args, prefix, "batches"))
            whole.append(run_h5py(args, prefix, "whole"))
    import h5py
    report = {
        "data": args.data, "ranks": args.ranks, "strategy": args.strategy, "batch_per_rank": args.batch,
        "repeats": args.repeats, "h5py": h5py.__version__, "h5py_chunk_cache_mb": args.h5py_cache_mb,
        "ringtrain_samples_per_s": statistics.median(ours), "h5py_samples_per_s": statistics.median(theirs),
        "ringtrain_over_h5py": statistics.median(a / b for a, b in zip(ours, theirs)),
        "h5py_whole_samples_per_s": statistics.median(whole),
        "ringtrain_over_h5py_whole": statistics.median(a / b for a, b in zip(ours, whole)),
        "ringtrain_read_MBps": statistics.median(reads), "raw_pread_MBps": statistics.median(raw),
        "runs_ringtrain": ours, "runs_h5py": theirs, "runs_h5py_whole": whole,
    }
    print(f"{args.ranks} rank(s), {args.strategy}: ringtrain {report['ringtrain_samples_per_s']:,.0f} samples/s, "
          f"h5py {h5py.__version__} {report['h5py_samples_per_s']:,.0f} samples/s: "
          f"{report['ringtrain_over_h5py']:.1f}x; whole array read then numpy-indexed: "
          f"{report['h5py_whole_samples_per_s']:,.0f} samples/s ({report['ringtrain_over_h5py_whole']:.2f}x) "
          f"(medians of {args.repeats})")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
